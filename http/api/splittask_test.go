package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/internal/strictjson"
)

// splitTaskRebuilding is splitTask as it was before it handed a body without a task on unchanged: every object
// body parsed and rebuilt without its task member. The reference the fuzz test holds splitTask to.
func splitTaskRebuilding(body []byte) (rest []byte, task json.RawMessage, present bool) {
	var raw json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &raw) != nil {
		return body, nil, false
	}
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		return body, nil, false
	}
	return withoutTask(members)
}

func TestSplitTask(t *testing.T) {
	for _, c := range []struct {
		name, body   string
		rest, task   string
		present, own bool // own: the body handed on as it came
	}{
		{name: "plain call", body: `{"name":"echo__echo","arguments":{"message":"hi"}}`,
			rest: `{"name":"echo__echo","arguments":{"message":"hi"}}`, own: true},
		{name: "task word in a value", body: `{"name":"todo__add_task","arguments":{"task":"write"}}`,
			rest: `{"name":"todo__add_task","arguments":{"task":"write"}}`, own: true},
		{name: "task member", body: `{"name":"a__b","task":{"ttl_ms":60000},"arguments":{}}`,
			rest: `{"name":"a__b","arguments":{}}`, task: `{"ttl_ms":60000}`, present: true},
		{name: "task key escaped", body: `{"name":"a__b","t\u0061sk":{}}`,
			rest: `{"name":"a__b"}`, task: `{}`, present: true},
		{name: "a second task member stays for validation", body: `{"task":{},"name":"a__b","task":1}`,
			rest: `{"name":"a__b","task":1}`, task: `{}`, present: true},
		{name: "not an object", body: `["task"]`, rest: `["task"]`, own: true},
		{name: "not JSON", body: `{"task":`, rest: `{"task":`, own: true},
		{name: "empty", body: ``, rest: ``, own: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			rest, task, present := splitTask(body)
			if string(rest) != c.rest || string(task) != c.task || present != c.present {
				t.Fatalf("splitTask(%s) = %s, %s, %v; want %s, %s, %v", c.body, rest, task, present, c.rest, c.task, c.present)
			}
			if own := len(body) > 0 && len(rest) > 0 && &rest[0] == &body[0]; own != c.own && len(body) > 0 {
				t.Errorf("body handed on as it came: %v, want %v", own, c.own)
			}
		})
	}
}

// FuzzSplitTask: whatever the body, the call it leads to is the call the rebuilding split led to: the same task,
// and validate.Call of what is left gives the same request and the same field errors. A body that is not UTF-8 is
// left out: its rebuild replaced the bad bytes of its keys, where validation now names the body as not UTF-8.
func FuzzSplitTask(f *testing.F) {
	for _, s := range []string{
		`{"name":"echo__echo","arguments":{"message":"hi"}}`,
		`{"name":"a__b","task":{"ttl_ms":60000},"arguments":{}}`,
		`{"name":"a__b","t\u0061sk":{},"arguments":{"task":"x"}}`,
		`{"name":"a","name":"b","task":1,"task":2}`,
		` {"server_id":"x","name":"y","profile":"p"} `,
		`{"name":"a__b","arguments":{"task":"write"},"extra":true}`,
		`[]`, `{`, `null`, `{"\u0074ask":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		rest, task, present := splitTask(bytes.Clone(body))
		wantRest, wantTask, wantPresent := splitTaskRebuilding(bytes.Clone(body))
		if present != wantPresent || !bytes.Equal(task, wantTask) {
			t.Fatalf("task of %q: %q %v, want %q %v", body, task, present, wantTask, wantPresent)
		}
		req, errs := validate.Call(rest, validate.RESTCall)
		wantReq, wantErrs := validate.Call(wantRest, validate.RESTCall)
		if !reflect.DeepEqual(req, wantReq) || !reflect.DeepEqual(errs, wantErrs) {
			t.Fatalf("validate.Call after splitting %q:\n%+v %+v\nwant\n%+v %+v", body, req, errs, wantReq, wantErrs)
		}
	})
}

// BenchmarkCallBody is what a REST tools/call does with its body before the gateway: split off a task, validate
// the call.
func BenchmarkCallBody(b *testing.B) {
	body := []byte(`{"name":"echo__echo","arguments":{"message":"hello"}}`)
	b.ReportAllocs()
	for b.Loop() {
		rest, _, _ := splitTask(body)
		if _, errs := validate.Call(rest, validate.RESTCall); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}
