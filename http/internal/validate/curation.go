package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Filter modes as the API spells them ("none" removes the filter).
const FilterNone = "none"

// MaxProfileClients caps the client tokens one profile binds.
const MaxProfileClients = 1000

// MaxProfileTokenBudget caps a profile's token_budget (the most a client's own budget hint may ask, too).
const MaxProfileTokenBudget = 1_000_000_000

func profileNameSchema(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(curation.MaxNameLength), Pattern: "^[a-zA-Z0-9_-]+$", Description: desc}
}

// ProfileName returns why a profile name is refused ("" when it is fine): 1 to 64 of [a-zA-Z0-9_-], so that it is
// a path segment of /mcp/profiles/{name} as it is.
func ProfileName(name string) string {
	if !curation.ClientSafe(name) {
		return "profile name must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'"
	}
	return ""
}

// objectChecker starts reading a JSON object body; ok false means the errors are final.
func objectChecker(body []byte, allowed ...string) (*strictjson.Checker, map[string]json.RawMessage, bool) {
	c := strictjson.New("body")
	members, ok := c.Object(body)
	if !ok {
		return c, nil, false
	}
	fields := c.Index(members, c.At())
	set := map[string]bool{}
	for _, k := range allowed {
		set[k] = true
	}
	for _, m := range members {
		if !set[m.Key] {
			c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", c.At(m.Key))
		}
	}
	out := map[string]json.RawMessage{}
	for k, v := range fields {
		if strictjson.KindOf(v) != strictjson.KindNull {
			out[k] = v
		}
	}
	return c, out, true
}

// patterns checks a list of glob patterns at loc.
func patterns(c *strictjson.Checker, raw json.RawMessage, loc []any) []string {
	list, ok := c.StringList(raw, loc)
	if !ok {
		return nil
	}
	if len(list) > curation.MaxPatterns {
		c.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d patterns", curation.MaxPatterns), loc)
		return nil
	}
	for i, p := range list {
		if err := curation.CheckPattern(p); err != nil {
			c.Add(strictjson.FieldValueError, err.Error(), strictjson.At(loc, i))
		}
	}
	return list
}

// ToolFilter reads PUT /servers/{id}/tool-filter: {"mode": "allow"|"deny"|"none", "patterns": [...]}. allow and
// deny need patterns (an empty allow list would hide every tool: say "allow" with ["*"] or "none" instead).
func ToolFilter(body []byte) (persistence.ToolFilter, []FieldError) {
	c, f, ok := objectChecker(body, "mode", "patterns")
	if !ok {
		return persistence.ToolFilter{}, c.Errors()
	}
	var out persistence.ToolFilter
	raw, has := f["mode"]
	if !has {
		c.Add(strictjson.FieldMissing, "Field required", c.At("mode"))
	} else if mode, ok := c.String(raw, c.At("mode")); ok {
		switch mode {
		case persistence.FilterAllow, persistence.FilterDeny:
			out.Mode = mode
		case FilterNone:
		default:
			c.Add(strictjson.FieldValueError, "mode must be one of [allow deny none]", c.At("mode"))
		}
	}
	if raw, has := f["patterns"]; has {
		out.Patterns = patterns(c, raw, c.At("patterns"))
	}
	if out.Mode != "" && len(out.Patterns) == 0 && c.Count() == 0 {
		c.Add(strictjson.FieldValueError, "patterns must list at least one pattern for an allow or deny filter", c.At("patterns"))
	}
	if out.Mode == "" {
		out.Patterns = nil
	}
	if c.Count() > 0 {
		return persistence.ToolFilter{}, c.Errors()
	}
	return out, nil
}

// Pinning reads PUT /servers/{id}/pinning: {"enabled": bool, "pin_new_tools": "withhold"|"serve"}, both optional
// (at least one).
func Pinning(body []byte) (persistence.ToolPolicyPatch, []FieldError) {
	c, f, ok := objectChecker(body, "enabled", "pin_new_tools")
	if !ok {
		return persistence.ToolPolicyPatch{}, c.Errors()
	}
	var p persistence.ToolPolicyPatch
	if raw, has := f["enabled"]; has {
		if b, ok := c.Bool(raw, c.At("enabled")); ok {
			p.Pinning = &b
		}
	}
	if raw, has := f["pin_new_tools"]; has {
		if s, ok := c.String(raw, c.At("pin_new_tools")); ok {
			if s != persistence.PinNewWithhold && s != persistence.PinNewServe {
				c.Add(strictjson.FieldValueError, "pin_new_tools must be one of [withhold serve]", c.At("pin_new_tools"))
			} else {
				p.PinNewTools = &s
			}
		}
	}
	if len(f) == 0 && c.Count() == 0 {
		c.Add(strictjson.FieldMissing, "Field required: enabled or pin_new_tools", c.At("enabled"))
	}
	if c.Count() > 0 {
		return persistence.ToolPolicyPatch{}, c.Errors()
	}
	return p, nil
}

// Override reads PUT /servers/{id}/tools/{tool}/override: exposed_name (client-safe, not a meta-tool's name),
// description (at most 8 KiB, not blank), annotations (title string; readOnlyHint, destructiveHint, idempotentHint,
// openWorldHint booleans). At least one of them.
func Override(body []byte) (persistence.ToolOverride, []FieldError) {
	c, f, ok := objectChecker(body, "exposed_name", "description", "annotations")
	if !ok {
		return persistence.ToolOverride{}, c.Errors()
	}
	var o persistence.ToolOverride
	if raw, has := f["exposed_name"]; has {
		if s, ok := c.String(raw, c.At("exposed_name")); ok {
			switch {
			case !curation.ClientSafe(s):
				c.Add(strictjson.FieldValueError, "exposed_name must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'", c.At("exposed_name"))
			case routing.IsMetaToolName(s):
				c.Add(strictjson.FieldValueError, "exposed_name is one of the aggregator's own tools", c.At("exposed_name"))
			default:
				o.ExposedName = &s
			}
		}
	}
	if raw, has := f["description"]; has {
		if s, ok := c.String(raw, c.At("description")); ok {
			if isBlank(s) || len(s) > curation.MaxDescription {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("description must be 1 to %d characters and not blank", curation.MaxDescription), c.At("description"))
			} else {
				o.Description = &s
			}
		}
	}
	if raw, has := f["annotations"]; has {
		o.Annotations = annotations(c, raw, c.At("annotations"))
	}
	if len(f) == 0 && c.Count() == 0 {
		c.Add(strictjson.FieldMissing, "Field required: exposed_name, description or annotations", c.At("exposed_name"))
	}
	if c.Count() > 0 {
		return persistence.ToolOverride{}, c.Errors()
	}
	return o, nil
}

func annotations(c *strictjson.Checker, raw json.RawMessage, loc []any) *persistence.ToolAnnotations {
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		c.Add(strictjson.FieldTypeError, "annotations must be an object", loc)
		return nil
	}
	var a persistence.ToolAnnotations
	for _, m := range members {
		at := strictjson.At(loc, m.Key)
		if strictjson.KindOf(m.Value) == strictjson.KindNull {
			continue
		}
		switch m.Key {
		case "title":
			if s, ok := c.String(m.Value, at); ok {
				if len(s) > 256 {
					c.Add(strictjson.FieldValueError, "title must be at most 256 characters", at)
				} else {
					a.Title = &s
				}
			}
		case "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint":
			if b, ok := c.Bool(m.Value, at); ok {
				switch m.Key {
				case "readOnlyHint":
					a.ReadOnlyHint = &b
				case "destructiveHint":
					a.DestructiveHint = &b
				case "idempotentHint":
					a.IdempotentHint = &b
				default:
					a.OpenWorldHint = &b
				}
			}
		default:
			c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", at)
		}
	}
	return &a
}

// Profile reads PUT /profiles/{name}: description, selectors (each with server, tools patterns, skills; at least
// one field each), clients (token names), bindings (OAuth subjects and claim values). The name comes from the path.
func Profile(name string, body []byte) (persistence.Profile, []FieldError) {
	c, f, ok := objectChecker(body, "description", "selectors", "clients", "bindings", "token_budget")
	if !ok {
		return persistence.Profile{}, c.Errors()
	}
	p := persistence.Profile{Name: name}
	if msg := ProfileName(name); msg != "" {
		c.Add(strictjson.FieldValueError, msg, []any{"path", "name"})
	}
	if raw, has := f["description"]; has {
		if s, ok := c.String(raw, c.At("description")); ok {
			if len(s) > curation.MaxDescription {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("description must be at most %d characters", curation.MaxDescription), c.At("description"))
			}
			p.Description = &s
		}
	}
	raw, has := f["selectors"]
	if !has {
		c.Add(strictjson.FieldMissing, "Field required", c.At("selectors"))
	} else {
		p.Selectors = selectors(c, raw, c.At("selectors"))
	}
	if raw, has := f["clients"]; has {
		if list, ok := c.StringList(raw, c.At("clients")); ok {
			if len(list) > MaxProfileClients {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d clients", MaxProfileClients), c.At("clients"))
			}
			for i, s := range list {
				if s == "" || len(s) > 128 {
					c.Add(strictjson.FieldValueError, "a client is a token name of 1 to 128 characters", c.At("clients", i))
				}
			}
			p.Clients = list
		}
	}
	if raw, has := f["bindings"]; has {
		p.Bindings = bindings(c, raw, c.At("bindings"))
	}
	if raw, has := f["token_budget"]; has {
		n, err := strconv.Atoi(string(raw))
		if strictjson.KindOf(raw) != strictjson.KindNumber || err != nil {
			c.Add(strictjson.FieldTypeError, "token_budget must be an integer", c.At("token_budget"))
		} else if n < 0 || n > MaxProfileTokenBudget {
			c.Add(strictjson.FieldValueError, fmt.Sprintf("token_budget must be between 0 and %d", MaxProfileTokenBudget), c.At("token_budget"))
		} else {
			p.TokenBudget = &n
		}
	}
	if c.Count() > 0 {
		return persistence.Profile{}, c.Errors()
	}
	return p, nil
}

// MaxBindingText caps a binding's subject, claim name and value.
const MaxBindingText = 256

// bindings reads a profile's OAuth bindings: each {"subject": s} or {"claim": name, "value": v}.
func bindings(c *strictjson.Checker, raw json.RawMessage, loc []any) []persistence.ProfileBinding {
	var items []json.RawMessage
	if strictjson.KindOf(raw) != strictjson.KindArray || json.Unmarshal(raw, &items) != nil {
		c.Add(strictjson.FieldTypeError, "Input should be a valid array", loc)
		return nil
	}
	if len(items) > MaxProfileClients {
		c.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d bindings", MaxProfileClients), loc)
		return nil
	}
	out := make([]persistence.ProfileBinding, 0, len(items))
	for i, it := range items {
		at := strictjson.At(loc, i)
		members, ok := strictjson.ObjectMembers(it)
		if !ok {
			c.Add(strictjson.FieldTypeError, `a binding must be an object: {"subject": ...} or {"claim": ..., "value": ...}`, at)
			continue
		}
		var b persistence.ProfileBinding
		bad := false
		for _, m := range members {
			mat := strictjson.At(at, m.Key)
			var dst *string
			switch m.Key {
			case "subject":
				dst = &b.Subject
			case "claim":
				dst = &b.Claim
			case "value":
				dst = &b.Value
			default:
				c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", mat)
				bad = true
				continue
			}
			v, ok := c.String(m.Value, mat)
			if !ok {
				bad = true
				continue
			}
			if v == "" || len(v) > MaxBindingText {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("%s must be 1 to %d characters", m.Key, MaxBindingText), mat)
				bad = true
				continue
			}
			*dst = v
		}
		if bad {
			continue
		}
		switch {
		case b.Subject != "" && (b.Claim != "" || b.Value != ""):
			c.Add(strictjson.FieldValueError, "a binding names a subject, or a claim and its value, not both", at)
		case b.Subject == "" && (b.Claim == "" || b.Value == ""):
			c.Add(strictjson.FieldValueError, `a binding is {"subject": ...} or {"claim": ..., "value": ...}`, at)
		default:
			out = append(out, b)
		}
	}
	return out
}

func selectors(c *strictjson.Checker, raw json.RawMessage, loc []any) []persistence.ProfileSelector {
	var items []json.RawMessage
	if strictjson.KindOf(raw) != strictjson.KindArray || json.Unmarshal(raw, &items) != nil {
		c.Add(strictjson.FieldTypeError, "selectors must be a list", loc)
		return nil
	}
	if len(items) > curation.MaxSelectors {
		c.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d selectors", curation.MaxSelectors), loc)
		return nil
	}
	out := make([]persistence.ProfileSelector, 0, len(items))
	for i, it := range items {
		at := strictjson.At(loc, i)
		members, ok := strictjson.ObjectMembers(it)
		if !ok {
			c.Add(strictjson.FieldTypeError, "a selector must be an object", at)
			continue
		}
		var s persistence.ProfileSelector
		for _, m := range members {
			mat := strictjson.At(at, m.Key)
			if strictjson.KindOf(m.Value) == strictjson.KindNull {
				continue
			}
			switch m.Key {
			case "server":
				if v, ok := c.String(m.Value, mat); ok {
					if v == "" || len(v) > 255 {
						c.Add(strictjson.FieldValueError, "server must be a server name of 1 to 255 characters", mat)
					}
					s.Server = v
				}
			case "tools":
				s.Tools = patterns(c, m.Value, mat)
			case "skills":
				if v, ok := c.StringList(m.Value, mat); ok {
					if len(v) > curation.MaxPatterns {
						c.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d skills", curation.MaxPatterns), mat)
					}
					s.Skills = v
				}
			default:
				c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", mat)
			}
		}
		if s.Server == "" && len(s.Tools) == 0 && len(s.Skills) == 0 {
			c.Add(strictjson.FieldValueError, "a selector needs server, tools or skills", at)
		}
		out = append(out, s)
	}
	return out
}

// Decision reads the optional body of an approve or reject: {"hash": "<pending hash>"} (the change the admin saw).
func Decision(body []byte) (string, []FieldError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", nil
	}
	c, f, ok := objectChecker(body, "hash")
	if !ok {
		return "", c.Errors()
	}
	var hash string
	if raw, has := f["hash"]; has {
		if s, ok := c.String(raw, c.At("hash")); ok {
			if len(s) != 64 {
				c.Add(strictjson.FieldValueError, "hash must be the 64 hex digits of a pending change", c.At("hash"))
			}
			hash = s
		}
	}
	if c.Count() > 0 {
		return "", c.Errors()
	}
	return hash, nil
}

// The schemas of the curation bodies (the OpenAPI document publishes them; the validators above enforce them).

func patternsSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", MaxItems: ptr(curation.MaxPatterns), Items: &jsonschema.Schema{Type: "string",
		MinLength: ptr(1), MaxLength: ptr(curation.MaxPatternLength)}, Description: "Glob patterns (Go path.Match)"}
}

// ToolFilterSchema is PUT /servers/{id}/tool-filter's body.
func ToolFilterSchema() *jsonschema.Schema {
	return object([]property{
		prop("mode", &jsonschema.Schema{Type: "string", Enum: values(persistence.FilterAllow, persistence.FilterDeny, FilterNone)}),
		prop("patterns", patternsSchema()),
	}, "mode")
}

// PinningSchema is PUT /servers/{id}/pinning's body.
func PinningSchema() *jsonschema.Schema {
	s := object([]property{
		prop("enabled", &jsonschema.Schema{Type: "boolean"}),
		prop("pin_new_tools", &jsonschema.Schema{Type: "string", Enum: values(persistence.PinNewServe, persistence.PinNewWithhold)}),
	})
	s.MinProperties = ptr(1)
	return s
}

// OverrideSchema is PUT /servers/{id}/tools/{tool}/override's body.
func OverrideSchema() *jsonschema.Schema {
	b := &jsonschema.Schema{Type: "boolean"}
	s := object([]property{
		prop("exposed_name", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(curation.MaxNameLength), Pattern: "^[a-zA-Z0-9_-]+$"}),
		prop("description", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(curation.MaxDescription)}),
		prop("annotations", object([]property{prop("title", &jsonschema.Schema{Type: "string", MaxLength: ptr(256)}),
			prop("readOnlyHint", b), prop("destructiveHint", b), prop("idempotentHint", b), prop("openWorldHint", b)})),
	})
	s.MinProperties = ptr(1)
	return s
}

// ProfileSchema is PUT /profiles/{name}'s body.
func ProfileSchema() *jsonschema.Schema {
	selector := object([]property{
		prop("server", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(255)}),
		prop("tools", patternsSchema()),
		prop("skills", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"}, MaxItems: ptr(curation.MaxPatterns)}),
	})
	selector.MinProperties = ptr(1)
	return object([]property{
		prop("description", &jsonschema.Schema{Type: "string", MaxLength: ptr(curation.MaxDescription)}),
		prop("selectors", &jsonschema.Schema{Type: "array", Items: selector, MaxItems: ptr(curation.MaxSelectors)}),
		prop("clients", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(128)},
			MaxItems: ptr(MaxProfileClients), Description: "Client token names bound to the profile"}),
		prop("bindings", bindingsSchema()),
		prop("token_budget", &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0), Maximum: ptr(float64(MaxProfileTokenBudget)),
			Description: "Tokens a tools/list answer of the profile's endpoint may cost when its whole toolset does not fit " +
				"(absent or null: the daemon's MCP_AGGREGATOR_MCP_TOKEN_BUDGET; 0: no budget). A client's own hint overrides it"}),
	}, "selectors")
}

// bindingsSchema is a profile's OAuth bindings: a subject, or a claim and its value.
func bindingsSchema() *jsonschema.Schema {
	text := func() *jsonschema.Schema {
		return &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxBindingText)}
	}
	subject := object([]property{prop("subject", text())}, "subject")
	claim := object([]property{prop("claim", text()), prop("value", text())}, "claim", "value")
	return &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{OneOf: []*jsonschema.Schema{subject, claim}},
		MaxItems:    ptr(MaxProfileClients),
		Description: "OAuth callers bound to the profile: a subject (sub), or every token whose claim holds the value"}
}

// DecisionSchema is the optional body of an approve or reject.
func DecisionSchema() *jsonschema.Schema {
	return object([]property{prop("hash", &jsonschema.Schema{Type: "string", MinLength: ptr(64), MaxLength: ptr(64),
		Description: "The pending hash the admin reviewed"})})
}
