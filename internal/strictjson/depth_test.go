package strictjson

import "testing"

func TestNestedAtMost(t *testing.T) {
	for _, tc := range []struct {
		data string
		max  int
		want bool
	}{
		{`{}`, 1, true},
		{`{"a":[{}]}`, 3, true},
		{`{"a":[{}]}`, 2, false},
		{`{"a":"[[[[\"{{{{"}`, 1, true},
		{`[[1],[2],[3]]`, 2, true},
		{`"\\"[[`, 1, false},
	} {
		if got := NestedAtMost([]byte(tc.data), tc.max); got != tc.want {
			t.Errorf("NestedAtMost(%s, %d) = %v, want %v", tc.data, tc.max, got, tc.want)
		}
	}
}
