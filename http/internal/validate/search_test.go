package validate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors"
)

// TestSearchGolden pins the whole answer of Search, request and every field error in order: the rules were moved
// here from http/api unchanged, and the bounds and enums now come from SearchSchema.
func TestSearchGolden(t *testing.T) {
	tests := []struct{ body, request, errs string }{
		{"{\"query\":\"send an email\"}", "{\"Query\":\"send an email\",\"ItemType\":\"tool\",\"IncludeExternal\":true,\"ServerFilter\":null,\"Limit\":10,\"SkillThreshold\":0.4,\"ToolThreshold\":0.25,\"IncludeSchemas\":false,\"Strategy\":\"hierarchical\"}", "null"},
		{"{\"query\":\"x\",\"item_type\":\"skill\",\"include_external\":false,\"server_filter\":[\"a\",\"b\"],\"limit\":100,\"skill_threshold\":0,\"tool_threshold\":1,\"include_schemas\":true,\"strategy\":\"direct\"}", "{\"Query\":\"x\",\"ItemType\":\"skill\",\"IncludeExternal\":false,\"ServerFilter\":[\"a\",\"b\"],\"Limit\":100,\"SkillThreshold\":0,\"ToolThreshold\":1,\"IncludeSchemas\":true,\"Strategy\":\"direct\"}", "null"},
		{"{\"query\":\"\",\"limit\":0,\"strategy\":\"magic\",\"extra\":1}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"extra\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"body\",\"query\"],\"msg\":\"query must not be empty\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"strategy\"],\"msg\":\"strategy must be one of [hierarchical direct]\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"limit\"],\"msg\":\"limit must be between 1 and 100\",\"type\":\"value_error\"}]"},
		{"{\"limit\":\"5\",\"tool_threshold\":2}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"query\"],\"msg\":\"Field required\",\"type\":\"missing\"},{\"loc\":[\"body\",\"limit\"],\"msg\":\"limit must be an integer\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"tool_threshold\"],\"msg\":\"tool_threshold must be between 0 and 1\",\"type\":\"value_error\"}]"},
		{"{\"query\":\"x\",\"item_type\":\"prompt\",\"server_filter\":\"github\"}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"item_type\"],\"msg\":\"item_type must be one of [tool skill]\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"server_filter\"],\"msg\":\"Input should be a valid array\",\"type\":\"type_error\"}]"},
		{"{\"query\":\" \\t\\n\",\"limit\":1.5,\"skill_threshold\":\"a\",\"include_schemas\":\"yes\",\"server_filter\":[1,\"a\"]}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"query\"],\"msg\":\"query must not be empty\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"include_schemas\"],\"msg\":\"Input should be a valid boolean\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"server_filter\",0],\"msg\":\"Input should be a valid string\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"limit\"],\"msg\":\"limit must be an integer\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"skill_threshold\"],\"msg\":\"skill_threshold must be a number\",\"type\":\"type_error\"}]"},
		{"{\"query\":null,\"limit\":null,\"strategy\":null}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"query\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"{\"query\":\"a\",\"query\":\"b\"}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"query\"],\"msg\":\"Duplicate key\",\"type\":\"value_error\"}]"},
		{"{\"query\":\"é\x00\"}", "{\"Query\":\"\",\"ItemType\":\"tool\",\"IncludeExternal\":true,\"ServerFilter\":null,\"Limit\":10,\"SkillThreshold\":0.4,\"ToolThreshold\":0.25,\"IncludeSchemas\":false,\"Strategy\":\"hierarchical\"}", "[{\"loc\":[\"body\"],\"msg\":\"JSON decode error: invalid character '\\\\x00' in string literal\",\"type\":\"json_invalid\"}]"},
		{"[]", "{\"Query\":\"\",\"ItemType\":\"tool\",\"IncludeExternal\":true,\"ServerFilter\":null,\"Limit\":10,\"SkillThreshold\":0.4,\"ToolThreshold\":0.25,\"IncludeSchemas\":false,\"Strategy\":\"hierarchical\"}", "[{\"loc\":[\"body\"],\"msg\":\"Input should be a JSON object\",\"type\":\"type_error\"}]"},
		{"", "{\"Query\":\"\",\"ItemType\":\"tool\",\"IncludeExternal\":true,\"ServerFilter\":null,\"Limit\":10,\"SkillThreshold\":0.4,\"ToolThreshold\":0.25,\"IncludeSchemas\":false,\"Strategy\":\"hierarchical\"}", "[{\"loc\":[\"body\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"{", "{\"Query\":\"\",\"ItemType\":\"tool\",\"IncludeExternal\":true,\"ServerFilter\":null,\"Limit\":10,\"SkillThreshold\":0.4,\"ToolThreshold\":0.25,\"IncludeSchemas\":false,\"Strategy\":\"hierarchical\"}", "[{\"loc\":[\"body\"],\"msg\":\"JSON decode error: unexpected end of JSON input\",\"type\":\"json_invalid\"}]"},
		{"{\"query\":\"a\",\"limit\":101,\"skill_threshold\":-0.1}", "{\"Query\":\"\",\"ItemType\":\"\",\"IncludeExternal\":false,\"ServerFilter\":null,\"Limit\":0,\"SkillThreshold\":0,\"ToolThreshold\":0,\"IncludeSchemas\":false,\"Strategy\":\"\"}", "[{\"loc\":[\"body\",\"limit\"],\"msg\":\"limit must be between 1 and 100\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"skill_threshold\"],\"msg\":\"skill_threshold must be between 0 and 1\",\"type\":\"value_error\"}]"},
	}
	for _, tc := range tests {
		r, errs := Search([]byte(tc.body))
		rj, _ := json.Marshal(r)
		ej, _ := json.Marshal(errs)
		if string(rj) != tc.request || string(ej) != tc.errs {
			t.Errorf("%.80q:\n got %s %s\nwant %s %s", tc.body, rj, ej, tc.request, tc.errs)
		}
	}
}

// TestSearchSchema: the schema search_aggregated_tools publishes says what Search enforces: the same fields, the
// same enums and bounds, the same defaults.
func TestSearchSchema(t *testing.T) {
	s := SearchSchema()
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.Required) != "[query]" || s.AdditionalProperties == nil || len(s.Properties) != 10 {
		t.Errorf("schema %+v", s)
	}
	for k := range s.Properties {
		if k == "query" {
			continue
		}
		if _, errs := Search([]byte(`{"query":"q","` + k + `":null}`)); errs != nil {
			t.Errorf("%s: a field of the schema is refused: %+v", k, errs)
		}
	}
	if _, errs := Search([]byte(`{"query":"q","nope":1}`)); len(errs) != 1 || errs[0].Type != "extra_forbidden" {
		t.Errorf("a field outside the schema: %+v", errs)
	}
	def, _ := Search([]byte(`{"query":"q"}`))
	for k, want := range map[string]any{"limit": def.Limit, "strategy": def.Strategy, "tool_threshold": def.ToolThreshold,
		"skill_threshold": def.SkillThreshold, "include_schemas": def.IncludeSchemas, "item_type": def.ItemType,
		"include_external": def.IncludeExternal} {
		var got any
		if err := json.Unmarshal(s.Properties[k].Default, &got); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: schema default %s, Search's %v", k, s.Properties[k].Default, want)
		}
	}
	for _, st := range []string{actors.StrategyHierarchical, actors.StrategyDirect} {
		if _, errs := Search([]byte(`{"query":"q","strategy":"` + st + `"}`)); errs != nil {
			t.Errorf("strategy %s refused", st)
		}
	}
	// The published copy is the caller's: changing it changes neither Search nor the next copy.
	s.Properties["limit"].Maximum = nil
	if _, errs := Search([]byte(`{"query":"q","limit":100}`)); errs != nil || SearchSchema().Properties["limit"].Maximum == nil {
		t.Error("SearchSchema shares its schema")
	}
	if !strings.Contains(fmt.Sprint(enum(searchSchema, "item_type")), "skill") {
		t.Error("item_type enum")
	}
}
