package validate

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/strictjson"
)

// Defaults and bounds of a search (system-contract.md "Extended Search API" gives only examples). Engine and skill
// scores are calibrated to 0..1: random text scores under 0.25, a skill 1.5 standard deviations above the query's
// mean scores 0.5.
const (
	DefaultSearchLimit     = 10
	MaxSearchLimit         = 100
	DefaultSkillThreshold  = 0.4
	DefaultToolThreshold   = 0.25
	MaxSearchQueryLength   = 2000 // bytes: a query is refused past 2000 bytes, whatever its characters
	MaxSearchServerFilters = 100
)

// searchSchema is the one declaration of a search's fields; Search reads it, SearchSchema hands out copies.
var searchSchema = newSearchSchema()

// SearchSchema is the schema of a search request (POST /api/v1/search), search_aggregated_tools' input schema.
func SearchSchema() *jsonschema.Schema { return searchSchema.CloneSchemas() }

func newSearchSchema() *jsonschema.Schema {
	threshold := func(def float64, what string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "number", Minimum: ptr(0.0), Maximum: ptr(1.0), Default: jsonValue(def), Description: what}
	}
	return object([]property{
		prop("query", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxSearchQueryLength),
			Description: "What the tool should do"}),
		prop("server_filter", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"},
			MaxItems: ptr(MaxSearchServerFilters), Description: "Only these servers (names)"}),
		prop("limit", &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(float64(MaxSearchLimit)),
			Default: jsonValue(DefaultSearchLimit)}),
		prop("strategy", &jsonschema.Schema{Type: "string", Enum: values(gateway.StrategyHierarchical, gateway.StrategyDirect),
			Default: jsonValue(gateway.StrategyHierarchical)}),
		prop("tool_threshold", threshold(DefaultToolThreshold, "Lowest score of a tool answered")),
		prop("skill_threshold", threshold(DefaultSkillThreshold, "Lowest score of a matched skill")),
		prop("include_schemas", &jsonschema.Schema{Type: "boolean", Default: jsonValue(false)}),
		prop("item_type", &jsonschema.Schema{Type: "string", Enum: values("tool", "skill"), Default: jsonValue("tool")}),
		prop("include_external", &jsonschema.Schema{Type: "boolean", Default: jsonValue(true)}),
		prop("profile", profileNameSchema("Only the tools of this profile")),
	}, "query")
}

// DefaultSearch is the search request of the schema's defaults (SearchSchema), which Search starts from.
func DefaultSearch() gateway.SearchRequest {
	return gateway.SearchRequest{ItemType: "tool", IncludeExternal: true, Limit: DefaultSearchLimit,
		SkillThreshold: DefaultSkillThreshold, ToolThreshold: DefaultToolThreshold, Strategy: gateway.StrategyHierarchical}
}

// Search reads a search request (SearchSchema); every field but query is optional and null means absent. The
// REST endpoint uses it as it is, search_aggregated_tools through SearchOver with defaults of its own.
func Search(body []byte) (gateway.SearchRequest, []FieldError) {
	return SearchOver(DefaultSearch(), body)
}

// SearchOver is Search starting from r: a field the body does not set (or sets to null) keeps r's value.
func SearchOver(r gateway.SearchRequest, body []byte) (gateway.SearchRequest, []FieldError) {
	c := strictjson.New("body")
	at := c.At
	members, ok := c.Object(body)
	if !ok {
		return r, c.Errors()
	}
	fields := c.Index(members, at())
	for _, m := range members {
		if !known(searchSchema, m.Key) {
			c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", at(m.Key))
		}
	}
	present := func(k string) (json.RawMessage, bool) {
		raw, ok := fields[k]
		return raw, ok && strictjson.KindOf(raw) != strictjson.KindNull
	}
	if raw, ok := present("query"); !ok {
		c.Add(strictjson.FieldMissing, "Field required", at("query"))
	} else if q, ok := c.String(raw, at("query")); ok {
		switch {
		case len(q) == 0 || isBlank(q):
			c.Add(strictjson.FieldValueError, "query must not be empty", at("query"))
		case len(q) > MaxSearchQueryLength:
			c.Add(strictjson.FieldValueError, fmt.Sprintf("query must be at most %d characters", MaxSearchQueryLength), at("query"))
		}
		r.Query = q
	}
	oneOf := func(k string) (string, bool) {
		raw, ok := present(k)
		if !ok {
			return "", false
		}
		s, ok := c.String(raw, at(k))
		if !ok {
			return "", false
		}
		if inEnum(searchSchema, k, s) {
			return s, true
		}
		c.Add(strictjson.FieldValueError, fmt.Sprintf("%s must be one of %v", k, enum(searchSchema, k)), at(k))
		return "", false
	}
	if s, ok := oneOf("item_type"); ok {
		r.ItemType = s
	}
	if s, ok := oneOf("strategy"); ok {
		r.Strategy = s
	}
	if raw, ok := present("profile"); ok {
		if s, ok := c.String(raw, at("profile")); ok {
			if msg := ProfileName(s); msg != "" {
				c.Add(strictjson.FieldValueError, msg, at("profile"))
			}
			r.Profile = s
		}
	}
	for _, k := range []string{"include_external", "include_schemas"} {
		if raw, ok := present(k); ok {
			if b, ok := c.Bool(raw, at(k)); ok {
				if k == "include_external" {
					r.IncludeExternal = b
				} else {
					r.IncludeSchemas = b
				}
			}
		}
	}
	if raw, ok := present("server_filter"); ok {
		if names, ok := c.StringList(raw, at("server_filter")); ok {
			if len(names) > MaxSearchServerFilters {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("server_filter lists at most %d servers", MaxSearchServerFilters), at("server_filter"))
			}
			r.ServerFilter = names
		}
	}
	if raw, ok := present("limit"); ok {
		n, err := strconv.Atoi(string(raw))
		lo, hi := bounds(searchSchema, "limit")
		if strictjson.KindOf(raw) != strictjson.KindNumber || err != nil {
			c.Add(strictjson.FieldTypeError, "limit must be an integer", at("limit"))
		} else if float64(n) < lo || float64(n) > hi {
			c.Add(strictjson.FieldValueError, fmt.Sprintf("limit must be between %v and %v", lo, hi), at("limit"))
		} else {
			r.Limit = n
		}
	}
	for _, k := range []string{"skill_threshold", "tool_threshold"} {
		if raw, ok := present(k); ok {
			f, err := strconv.ParseFloat(string(raw), 64)
			lo, hi := bounds(searchSchema, k)
			if strictjson.KindOf(raw) != strictjson.KindNumber || err != nil {
				c.Add(strictjson.FieldTypeError, k+" must be a number", at(k))
			} else if f < lo || f > hi {
				c.Add(strictjson.FieldValueError, fmt.Sprintf("%s must be between %v and %v", k, lo, hi), at(k))
			} else if k == "skill_threshold" {
				r.SkillThreshold = f
			} else {
				r.ToolThreshold = f
			}
		}
	}
	if c.Count() > 0 {
		return gateway.SearchRequest{}, c.Errors()
	}
	return r, nil
}

func isBlank(s string) bool {
	for _, c := range s {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}
