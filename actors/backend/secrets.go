package backend

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// Secrets of a live session: the resolved secret values of one server, scrubbed from every error text its actors
// store, log or answer with. Which parts of a configuration are secret is connconfig's rule (RewriteSecrets); this
// file only collects the resolved values.

// minSecretLen: shorter resolved values are not scrubbed from error texts (they would mangle every message).
const minSecretLen = 4

// Secrets is the set of resolved secret values of one server, to be scrubbed from every error text the actor
// stores, logs or answers with. A nil *Secrets still scrubs URL userinfo.
type Secrets struct {
	values []string // longest first, so a secret inside another is replaced after it
}

// NewSecrets resolves the server's connection_config (as far as the environment allows) and collects its secret
// parts, in the spellings an error text may carry them: as is, URL-escaped, Go-quoted, JSON-escaped, and for
// Basic credentials decoded.
func NewSecrets(rec persistence.Server, lookup connconfig.LookupEnv) *Secrets {
	set := map[string]bool{}
	add := func(v string) {
		if len(v) < minSecretLen {
			return
		}
		set[v] = true
		set[url.QueryEscape(v)] = true
		set[url.PathEscape(v)] = true
		if q := strconv.Quote(v); len(q) > 2 {
			set[q[1:len(q)-1]] = true
		}
		if j, err := json.Marshal(v); err == nil && len(j) > 2 {
			set[string(j[1:len(j)-1])] = true
		}
	}
	collect := func(v string) string {
		add(v)
		if u, err := url.PathUnescape(v); err == nil {
			add(u)
		}
		if dec, err := base64.StdEncoding.DecodeString(v); err == nil && utf8.Valid(dec) {
			if _, pass, ok := strings.Cut(string(dec), ":"); ok {
				add(string(dec))
				add(pass)
			}
		}
		return v
	}
	cfg, _ := connconfig.Resolve(rec.ConnectionConfig, lookup) // as far as the environment allows
	if b, err := json.Marshal(cfg); err == nil {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			connconfig.RewriteSecrets(m, collect)
		}
	}
	if rec.HealthCheckURL != nil {
		connconfig.RewriteURL(*rec.HealthCheckURL, collect)
	}
	s := &Secrets{}
	for v := range set {
		if len(v) >= minSecretLen {
			s.values = append(s.values, v)
		}
	}
	slices.SortFunc(s.values, func(a, b string) int { return len(b) - len(a) })
	return s
}

// userinfoRe finds the userinfo of URLs in free text.
var userinfoRe = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@"'<>]+@`)

// Scrub removes URL userinfo and every secret value from an error text.
func (s *Secrets) Scrub(text string) string {
	text = userinfoRe.ReplaceAllString(text, "${1}***@")
	if s == nil {
		return text
	}
	for _, v := range s.values {
		text = strings.ReplaceAll(text, v, "***")
	}
	return text
}
