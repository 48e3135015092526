package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/persistence"
)

// The access policy routes (issue 27), admin only like curation (auth.Policy): GET and PUT
// /api/v1/aggregator/policy read and replace the whole document (package gateway/policy says what the rules
// mean). A PUT is validated and compiled before it is stored: an expression that does not compile is a 422 naming
// the rule's field and the position in the expression. A stored change is announced to every node and audited.

// accessPolicies is what the routes ask of the actor system (actors.System).
type accessPolicies interface {
	GetAccessPolicy(ctx context.Context) (policy.Document, persistence.AccessPolicy, error)
	PutAccessPolicy(ctx context.Context, doc policy.Document) (policy.Document, persistence.AccessPolicy, error)
}

// accessPolicyView is the answer of both routes.
type accessPolicyView struct {
	Default   string        `json:"default"`
	Rules     []policy.Rule `json:"rules"`
	Version   int64         `json:"version"`
	UpdatedAt *time.Time    `json:"updated_at"`
}

func newAccessPolicyView(d policy.Document, p persistence.AccessPolicy) accessPolicyView {
	v := accessPolicyView{Default: d.Default, Rules: d.Rules, Version: p.Version}
	if p.Version > 0 {
		at := p.UpdatedAt
		v.UpdatedAt = &at
	}
	return v
}

func (s *server) routeAccessPolicy(g fiber.Router) {
	g.Get("/policy", s.getAccessPolicy)
	g.Put("/policy", s.putAccessPolicy)
}

func (s *server) accessPoliciesOrUnavailable() (accessPolicies, error) {
	if ap, ok := s.curation.(accessPolicies); ok && ap != nil {
		return ap, nil
	}
	return nil, &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable, Detail: "The access policy is not available"}
}

// GET /policy: the document in force (no rule and default allow until one is written).
func (s *server) getAccessPolicy(c *fiber.Ctx) error {
	ap, err := s.accessPoliciesOrUnavailable()
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	d, p, err := ap.GetAccessPolicy(ctx)
	if err != nil {
		return mapError(err, subject{})
	}
	return c.JSON(newAccessPolicyView(d, p))
}

// PUT /policy: replace the document; 422 when it does not validate or an expression does not compile.
func (s *server) putAccessPolicy(c *fiber.Ctx) error {
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return apierror.Validation([]apierror.FieldError{{Loc: []any{"body"}, Type: apierror.FieldTypeError,
			Msg: "body must be a JSON object"}})
	}
	var doc policy.Document
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return apierror.Validation([]apierror.FieldError{{Loc: []any{"body"}, Type: apierror.FieldJSONInvalid,
			Msg: "body must be {\"default\": \"allow\"|\"deny\", \"rules\": [{\"name\", \"effect\", \"when\", \"description\"}]}: " + err.Error()}})
	}
	// Validate before anything else: a bad document is a 422 wherever it is sent.
	if _, err := policy.Compile(doc); err != nil {
		return policyInvalid(err)
	}
	ap, err := s.accessPoliciesOrUnavailable()
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	out, p, err := ap.PutAccessPolicy(ctx, doc)
	if err != nil {
		return policyInvalid(err)
	}
	names := make([]string, len(out.Rules))
	for i, r := range out.Rules {
		names[i] = r.Name
	}
	s.audit(c, audit.AccessPolicyUpdated, "", "", map[string]any{"version": p.Version, "default": out.Default, "rules": names})
	return c.JSON(newAccessPolicyView(out, p))
}

// policyInvalid is the 422 of a document that does not compile (a *policy.ValidationError), or mapError's answer.
func policyInvalid(err error) error {
	var verr *policy.ValidationError
	if errors.As(err, &verr) {
		return apierror.Validation([]apierror.FieldError{{Loc: append([]any{"body"}, verr.Loc...), Msg: verr.Msg, Type: apierror.FieldValueError}})
	}
	return mapError(err, subject{})
}
