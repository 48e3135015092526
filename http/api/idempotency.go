package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/persistence"
)

// Idempotent registration: POST /servers with an Idempotency-Key header (the practice of payment APIs and the
// IETF draft "The Idempotency-Key HTTP Header Field").
const (
	// headerIdempotencyKey is the request header that makes a registration retryable.
	headerIdempotencyKey = "Idempotency-Key"
	// headerIdempotentReplayed is set to "true" on a 201 answered from a stored key (no new registration).
	headerIdempotentReplayed = "Idempotent-Replayed"
	// idempotencyRetention is how long a stored key answers retries; an older key is forgotten.
	idempotencyRetention = 24 * time.Hour
)

// idempotencyKey reads the request's Idempotency-Key: ok false when there is none; a malformed one is 400
// INVALID_IDEMPOTENCY_KEY. The key is scoped to the caller (the token's name, or one scope while auth is off); its
// Fingerprint is for the caller to fill (requestFingerprint) once the body is known to be valid.
func idempotencyKey(c *fiber.Ctx) (persistence.IdempotencyKey, bool, error) {
	raw := c.Request().Header.Peek(headerIdempotencyKey)
	if raw == nil {
		return persistence.IdempotencyKey{}, false, nil
	}
	key, err := validate.IdempotencyKey(string(raw))
	if err != nil {
		return persistence.IdempotencyKey{}, false, &apierror.Error{Status: http.StatusBadRequest,
			Code: apierror.CodeInvalidIdempotencyKey, Detail: "Invalid Idempotency-Key header: " + err.Error(),
			Context: map[string]any{"header": headerIdempotencyKey}}
	}
	return persistence.IdempotencyKey{Scope: keyScope(c), Key: key, Retention: idempotencyRetention}, true, nil
}

// keyScope is whose idempotency keys a request uses: its token's, or the one anonymous scope while auth is off.
func keyScope(c *fiber.Ctx) string {
	if id := identityOf(c); id.Name != "" && !id.Anonymous {
		return "token:" + id.Name
	}
	return anonymousActor
}

// requestFingerprint is the SHA-256 (hex) of body's canonical JSON: parsed and written again, so spacing and the
// order of keys do not matter, numbers kept as written. Only the hash is stored: the body may hold secrets. body
// has passed validation, so it is one JSON object.
func requestFingerprint(body []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", fmt.Errorf("fingerprint registration: %w", err)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("fingerprint registration: %w", err)
	}
	sum := sha256.Sum256(append([]byte("POST /servers\n"), canon...))
	return hex.EncodeToString(sum[:]), nil
}
