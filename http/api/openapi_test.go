package api

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// TestOpenAPIDocumentResolves: the served document is JSON, every $ref names a component, and every component
// is a JSON Schema (draft 2020-12) that resolves.
func TestOpenAPIDocumentResolves(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", OpenAPIPath, "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var doc struct {
		OpenAPI    string                    `json:"openapi"`
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]*jsonschema.Schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || len(doc.Paths) == 0 {
		t.Fatalf("document head: %s %d paths", doc.OpenAPI, len(doc.Paths))
	}
	for name := range doc.Components.Schemas {
		if _, err := ComponentSchema(r.body, name); err != nil {
			t.Errorf("component %s: %v", name, err)
		}
	}
}

// TestComponentSchemaRejects: a component schema validates, so a drifted answer is caught: a server missing
// fields, an extra field, a wrong type, an error without its code.
func TestComponentSchemaRejects(t *testing.T) {
	e := newEnv(t)
	doc := e.do(t, "GET", OpenAPIPath, "").body
	for _, tc := range []struct {
		schema, value string
		ok            bool
	}{
		{"Probe", `{"status":"ok"}`, true},
		{"Probe", `{"status":1}`, false},
		{"Probe", `{"status":"ok","extra":true}`, false},
		{"Error", `{"detail":"x","error_code":"NOT_FOUND"}`, true},
		{"Error", `{"detail":[{"loc":["body","name"],"msg":"m","type":"missing"}],"error_code":"VALIDATION_ERROR"}`, true},
		{"Error", `{"detail":"x"}`, false},
		{"Error", `{"detail":[{"loc":"body","msg":"m","type":"missing"}],"error_code":"VALIDATION_ERROR"}`, false},
		{"ServerList", `{"servers":[{"id":"x"}],"total":1,"limit":1,"offset":0}`, false},
		{"ServerList", `{"servers":[],"total":0,"limit":1,"offset":0}`, true},
	} {
		s, err := ComponentSchema(doc, tc.schema)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		_ = json.Unmarshal([]byte(tc.value), &v)
		if err := s.Validate(v); (err == nil) != tc.ok {
			t.Errorf("%s %s: err %v, want ok=%v", tc.schema, tc.value, err, tc.ok)
		}
	}
}

// TestOpenAPIDocumentsIdempotencyKey: POST /servers documents its optional Idempotency-Key request header, the
// Idempotent-Replayed header of its 201 and the 400 of a malformed key.
func TestOpenAPIDocumentsIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", OpenAPIPath, "")
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name     string `json:"name"`
				In       string `json:"in"`
				Required bool   `json:"required"`
			} `json:"parameters"`
			Responses map[string]struct {
				Headers map[string]any `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	op := doc.Paths[apiPrefix+"/servers"]["post"]
	found := false
	for _, p := range op.Parameters {
		if p.Name == "Idempotency-Key" && p.In == "header" && !p.Required {
			found = true
		}
	}
	if !found {
		t.Errorf("POST /servers parameters %+v: no optional Idempotency-Key header", op.Parameters)
	}
	if _, ok := op.Responses["201"].Headers["Idempotent-Replayed"]; !ok {
		t.Errorf("POST /servers 201 headers %v: no Idempotent-Replayed", op.Responses["201"].Headers)
	}
	if _, ok := op.Responses["400"]; !ok {
		t.Error("POST /servers does not document 400")
	}
}
