// Package requestid carries the id of the request that caused some work inside a context.Context, from a front end
// through the actors to a backend. It has no dependencies and lives below the actors, so the actors and both HTTP
// front ends share it without the actors importing a front end.
package requestid

import "context"

// Header is the HTTP header a caller may send its own request id in; the front end echoes it on every response.
const Header = "X-Request-ID"

// ctxKey is unexported so no other package can collide with or overwrite the value.
type ctxKey struct{}

// With returns a copy of ctx carrying id, so downstream code can log which request it works for.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the request id carried by ctx, or "" when there is none (work not started by an HTTP request).
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// MaxLength bounds an id a client sends; a longer or odd one is replaced rather than logged.
const MaxLength = 128

// Sanitize keeps a caller's id only when it is short and made of characters safe in logs and headers; otherwise
// it returns "" and the caller makes a new one.
func Sanitize(id string) string {
	if id == "" || len(id) > MaxLength {
		return ""
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return ""
		}
	}
	return id
}
