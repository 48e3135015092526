package mcpserver_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/internal/validate"
)

// TestMetaToolSchemasAreTheRESTRules: the meta-tools that have a REST twin publish that twin's schema, the one
// the validators read, so a model is told the rules it will be held to; the others publish well-formed objects.
func TestMetaToolSchemasAreTheRESTRules(t *testing.T) {
	r := newRig(t)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	want := map[string]any{
		"add_mcp_server":          validate.RegistrationSchema(),
		"search_aggregated_tools": validate.SearchSchema(),
		"execute_external_tool":   validate.CallSchema(validate.ExecuteCall),
	}
	seen := 0
	for tool, err := range c.sess.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		got := normalize(t, tool.InputSchema)
		if got["type"] != "object" {
			t.Errorf("%s: input schema %v is not an object", tool.Name, got)
		}
		if w, ok := want[tool.Name]; ok {
			seen++
			if !reflect.DeepEqual(got, normalize(t, w)) {
				t.Errorf("%s: input schema\n got %v\nwant %v", tool.Name, got, normalize(t, w))
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d meta-tools with a REST twin listed", seen, len(want))
	}
}

func normalize(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
