package validate

import (
	"fmt"
	"strings"
)

// MaxIdempotencyKey is the longest Idempotency-Key a registration accepts (the stored column's width).
const MaxIdempotencyKey = 255

// IdempotencyKey checks the value of a registration's Idempotency-Key header and returns the key. The key is an
// opaque string of 1-255 printable ASCII characters (space to tilde, not starting or ending with a space); spaces
// around the value are not part of it, and a
// value written as a quoted string, the form of the IETF draft ("The Idempotency-Key HTTP Header Field": an
// sf-string), is unquoted, so `"abc"` and `abc` are one key. Anything else is an error saying what is wrong,
// never echoing the value.
func IdempotencyKey(raw string) (string, error) {
	k := strings.Trim(raw, " \t")
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
		if strings.ContainsAny(k, `"\`) {
			return "", fmt.Errorf("a quoted Idempotency-Key may not contain quotes or backslashes")
		}
	}
	if k == "" || len(k) > MaxIdempotencyKey {
		return "", fmt.Errorf("the Idempotency-Key must be 1-%d characters, not %d", MaxIdempotencyKey, len(k))
	}
	if k[0] == ' ' || k[len(k)-1] == ' ' {
		return "", fmt.Errorf("the Idempotency-Key may not start or end with a space")
	}
	for i := range len(k) {
		if c := k[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("the Idempotency-Key may hold printable ASCII characters only (byte %d is 0x%02x)", i, c)
		}
	}
	return k, nil
}
