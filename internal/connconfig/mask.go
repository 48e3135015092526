package connconfig

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/mcpgw/aggregator/internal/strictjson"
)

// Masked replaces a secret in every answer.
const Masked = "***"

// maskPart shows a secret part as written when it is made only of ${VAR} references (and punctuation between
// them), which say where the secret comes from without revealing it; anything else is Masked.
func maskPart(s string) string {
	rest := varRef.ReplaceAllString(s, "")
	if strings.IndexFunc(rest, func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r > 127
	}) < 0 {
		return s
	}
	return Masked
}

// Mask returns a connection_config as every answer shows it (system-contract.md, Security Contract): the values
// of headers named like secrets (and the credential after "Bearer "/"Basic "... in any header), every env value,
// URL userinfo and query parameters named like secrets, and secret command-line flags become "***"; a value whose
// secret part is made only of ${VAR} references is shown as written ("Bearer ${TOKEN}"). Keys are kept, so an
// admin sees what is set, and so are keys this package does not know. Anything that is not a JSON object is nil.
func Mask(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil || cfg == nil {
		return nil
	}
	RewriteSecrets(cfg, maskPart)
	return strictjson.Encode(cfg)
}

// MaskURL returns a URL (a health_check_url) with its userinfo and secret query parameters masked.
func MaskURL(u string) string { return RewriteURL(u, maskPart) }
