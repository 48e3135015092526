package strictjson

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestObject(t *testing.T) {
	tests := []struct {
		body, typ string
		members   int
	}{
		{`{"a":1,"a":2,"b":[{}]}`, "", 3},
		{` {} `, "", 0},
		{``, FieldMissing, 0},
		{" \n", FieldMissing, 0},
		{"\xff{}", FieldJSONInvalid, 0},
		{`{"a":`, FieldJSONInvalid, 0},
		{`{} x`, FieldJSONInvalid, 0},
		{`[]`, FieldTypeError, 0},
		{`null`, FieldTypeError, 0},
	}
	for _, tc := range tests {
		c := New("body")
		members, ok := c.Object([]byte(tc.body))
		errs := c.Errors()
		switch {
		case tc.typ == "" && (!ok || errs != nil || len(members) != tc.members):
			t.Errorf("%q: %v %v %+v", tc.body, members, ok, errs)
		case tc.typ != "" && (ok || len(errs) != 1 || errs[0].Type != tc.typ || fmt.Sprint(errs[0].Loc) != "[body]"):
			t.Errorf("%q: want one %s at body, got %+v", tc.body, tc.typ, errs)
		}
	}
}

func TestReaders(t *testing.T) {
	c := New("arguments")
	members, _ := c.Object([]byte(`{"s":"x","s":"y","n":"a\u0000","b":true,"l":["a",1],"m":{"k":"v","bad":"v"},"x":3}`))
	fields := c.Index(members, c.At())
	if s, ok := c.String(fields["s"], c.At("s")); !ok || s != "x" {
		t.Errorf("String kept %q (a duplicate keeps its first value)", s)
	}
	c.String(fields["n"], c.At("n"))
	c.String(fields["x"], c.At("x"))
	if b, ok := c.Bool(fields["b"], c.At("b")); !ok || !b {
		t.Error("Bool")
	}
	c.Bool(fields["s"], c.At("s"))
	c.StringList(fields["l"], c.At("l"))
	noBad := func(s string) string {
		if s == "bad" {
			return "bad key"
		}
		return ""
	}
	if m, ok := c.StringMap(fields["m"], c.At("m"), noBad, func(string) string { return "" }); ok || m["k"] != "v" {
		t.Errorf("StringMap %v %v", m, ok)
	}
	want := "[{[arguments s] Duplicate key value_error} {[arguments n] String should not contain NUL characters value_error} " +
		"{[arguments x] Input should be a valid string type_error} {[arguments s] Input should be a valid boolean type_error} " +
		"{[arguments l 1] Input should be a valid string type_error} {[arguments m bad] bad key value_error}]"
	if got := fmt.Sprint(c.Errors()); got != want {
		t.Errorf("errors\n got %s\nwant %s", got, want)
	}
	if c.Count() != 6 {
		t.Errorf("Count %d", c.Count())
	}
}

// TestCap: past MaxErrors one notice is reported at the root, and Count goes on.
func TestCap(t *testing.T) {
	c := New("body")
	for i := 0; i < MaxErrors+10; i++ {
		c.Add(FieldValueError, "x", c.At(i))
	}
	errs := c.Errors()
	if len(errs) != MaxErrors+1 || fmt.Sprint(errs[MaxErrors].Loc) != "[body]" || c.Count() != MaxErrors+10 {
		t.Errorf("%d errors, last %+v, count %d", len(errs), errs[len(errs)-1], c.Count())
	}
}

func TestKindOfAndEncode(t *testing.T) {
	for raw, want := range map[string]Kind{` {"a":1}`: KindObject, `[`: KindArray, `"x"`: KindString, `true`: KindBool,
		`false`: KindBool, `null`: KindNull, `-1`: KindNumber, `7`: KindNumber, ``: KindInvalid, `x`: KindInvalid} {
		if got := KindOf(json.RawMessage(raw)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", raw, got, want)
		}
	}
	if got := string(Encode(map[string]any{"b": "<&>", "a": []string{"x"}})); got != `{"a":["x"],"b":"<&>"}` {
		t.Errorf("Encode = %s", got)
	}
}
