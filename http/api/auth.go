package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
)

// identityKey is the locals key of the caller's auth.Identity.
type identityKey struct{}

// authenticate is the middleware after request ids and panic recovery: it finds the scope the route needs
// (auth.Policy, by method and path, matched the way Fiber routes), answers 401 or 403 in the error shape when the
// bearer token is missing, unknown or too weak, and otherwise puts the caller's identity in the locals and the user
// context (the audit actor, the rate limit key). A REST tool call then takes a token from the caller's bucket, or
// is answered 429 RATE_LIMITED with Retry-After.
func (s *server) authenticate(c *fiber.Ctx) error {
	var id auth.Identity
	if !s.tokens.Enabled() {
		id = auth.Anonymous(c.IP())
	} else if required := s.policy.Required(c.Method(), c.Path()); required == auth.ScopeNone {
		return c.Next()
	} else {
		var status int
		id, status = auth.CheckContext(c.UserContext(), s.tokens, c.Get(fiber.HeaderAuthorization), required)
		if status != 0 {
			code, detail := s.tokens.Detail(status, required)
			c.Set(fiber.HeaderWWWAuthenticate, s.tokens.Challenge(status, required))
			return &apierror.Error{Status: status, Code: code, Detail: detail}
		}
		id.IP = c.IP()
	}
	c.Locals(identityKey{}, id)
	c.SetUserContext(auth.WithIdentity(c.UserContext(), id))

	if auth.IsToolCall(c.Method(), c.Path()) {
		if e := apierror.RateLimit(s.limiter, id); e != nil {
			return e
		}
	}
	return c.Next()
}

// identityOf is the caller's identity (anonymous when the route is open or auth is off).
func identityOf(c *fiber.Ctx) auth.Identity {
	if id, ok := c.Locals(identityKey{}).(auth.Identity); ok {
		return id
	}
	return auth.Anonymous(c.IP())
}
