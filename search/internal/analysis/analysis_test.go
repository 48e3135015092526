package analysis

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func texts(ws []Word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Text
	}
	return out
}

func TestWords(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"spaces and punctuation", "  ,;!? ", nil},
		{"plain words", "Create a new Issue", []string{"create", "a", "new", "issue"}},
		{"snake_case", "get_current_stock_price", []string{"get", "current", "stock", "price", "getcurrentstockprice"}},
		{"camelCase", "getBaziDetail", []string{"get", "bazi", "detail", "getbazidetail"}},
		{"PascalCase", "GitHub", []string{"git", "hub", "github"}},
		{"acronym then word", "parseHTTPResponse", []string{"parse", "http", "response", "parsehttpresponse"}},
		{"all caps", "MFCC", []string{"mfcc"}},
		{"dashes", "get-weread-rank", []string{"get", "weread", "rank", "getwereadrank"}},
		{"dots separate segments", "github-mcp.create_issue",
			[]string{"github", "mcp", "githubmcp", "create", "issue", "createissue"}},
		{"domain", "www.baidu.com", []string{"www", "baidu", "com"}},
		{"sentence end is not a connector", "done. next", []string{"done", "next"}},
		{"leading and trailing connectors", "_private_ -x-", []string{"private", "x"}},
		{"digits stay attached", "mp3 base64_encode h264", []string{"mp3", "base64", "encode", "base64encode", "h264"}},
		{"numbers", "1km 2008 11:00", []string{"1km", "2008", "11", "00"}},
		{"path", "/root/pdf/report.pdf", []string{"root", "pdf", "report", "pdf"}},
		{"accents", "Café Über", []string{"café", "über"}},
		{"CJK unigrams and bigrams", "搜索网页", []string{"搜", "索", "搜索", "网", "索网", "页", "网页"}},
		{"CJK next to latin", "使用Bing搜索", []string{"使", "用", "使用", "bing", "搜", "索", "搜索"}},
		{"kana and hangul", "カナ한국", []string{"カ", "ナ", "カナ", "한", "ナ한", "국", "한국"}},
		{"invalid UTF-8 separates", "ab\xffcd\xfe", []string{"ab", "cd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := texts(Words(tt.in)); !slices.Equal(got, tt.want) {
				t.Errorf("Words(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestWordKinds(t *testing.T) {
	ws := Words("get_user 名字")
	want := []Word{{Text: "get", Part: true}, {Text: "user", Part: true}, {Text: "getuser", Compound: true},
		{Text: "名", CJK: true}, {Text: "字", CJK: true}, {Text: "名字", CJK: true}}
	if !slices.Equal(ws, want) {
		t.Errorf("Words = %+v, want %+v", ws, want)
	}
}

func TestLongWordIsCut(t *testing.T) {
	long := strings.Repeat("a", 500)
	ws := Words(long)
	if len(ws) != 1 || len(ws[0].Text) != maxWordLen {
		t.Errorf("Words(500 x a) = %d words, first %d bytes; want one of %d", len(ws), len(ws[0].Text), maxWordLen)
	}
}

func TestTerms(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Find the parking facilities near me", []string{"find", "park", "facil", "near"}},
		{"geocode_address", []string{"geocod", "address", "geocodeaddress"}},
		{"The and of", nil},
		{"使用必应", []string{"使", "用", "使用", "必", "用必", "应", "必应"}},
	}
	for _, tt := range tests {
		if got := Terms(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Terms(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestQueryTerms: a query drops the words of asking besides the function words; a tool's text keeps them, and
// compounds that contain them stay whole.
func TestQueryTerms(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Please, I need help to find the parking near me", []string{"find", "park", "near"}},
		{"Hi! Could you kindly show my unread emails? Thanks", []string{"show", "unread", "email"}},
		{"like_post", []string{"like", "post", "likepost"}},
		{"使用必应", []string{"使", "用", "使用", "必", "用必", "应", "必应"}},
	}
	for _, tt := range tests {
		if got := QueryTerms(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("QueryTerms(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Terms("Please provide the help topic"); !slices.Contains(got, "pleas") || !slices.Contains(got, "help") {
		t.Errorf("Terms dropped a word of asking from a tool's text: %q", got)
	}
}

func TestStem(t *testing.T) {
	// Pairs from Porter's paper and the reference vocabulary.
	tests := map[string]string{
		"caresses": "caress", "ponies": "poni", "ties": "ti", "caress": "caress", "cats": "cat",
		"feed": "feed", "agreed": "agre", "plastered": "plaster", "bled": "bled", "motoring": "motor",
		"sing": "sing", "conflated": "conflat", "troubled": "troubl", "sized": "size", "hopping": "hop",
		"tanned": "tan", "falling": "fall", "hissing": "hiss", "fizzed": "fizz", "failing": "fail",
		"filing": "file", "happy": "happi", "sky": "sky", "relational": "relat", "conditional": "condit",
		"rational": "ration", "digitizer": "digit", "operator": "oper", "feudalism": "feudal",
		"hopefulness": "hope", "formaliti": "formal", "triplicate": "triplic", "electrical": "electr",
		"goodness": "good", "revival": "reviv", "allowance": "allow", "inference": "infer",
		"adjustable": "adjust", "replacement": "replac", "adoption": "adopt", "communism": "commun",
		"effective": "effect", "probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control",
		"roll": "roll", "parking": "park", "searching": "search", "generate": "gener", "generated": "gener",
		// Not plain ASCII letters, or too short: unchanged.
		"mp3": "mp3", "café": "café", "is": "is", "": "",
	}
	for in, want := range tests {
		if got := Stem(in); got != want {
			t.Errorf("Stem(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSchemaParams(t *testing.T) {
	schema := `{"type":"object","properties":{
		"query":{"type":"string","description":"Search words"},
		"options":{"type":"object","title":"Options","properties":{"limit":{"type":"integer","description":"Max results"}}},
		"mode":{"type":"string","enum":["fast","exact",3]},
		"tags":{"type":"array","items":{"type":"object","properties":{"name":{"description":"Tag name"}}}},
		"bare": true
	},"anyOf":[{"properties":{"alt":{"description":"Alternative"}}}]}`
	got := SchemaParams([]byte(schema))
	want := []Param{
		{Name: "bare"},
		{Name: "mode", Enum: []string{"fast", "exact"}},
		{Name: "options", Description: "Options"},
		{Name: "limit", Description: "Max results"},
		{Name: "query", Description: "Search words"},
		{Name: "tags"},
		{Name: "name", Description: "Tag name"},
		{Name: "alt", Description: "Alternative"},
	}
	if len(got) != len(want) {
		t.Fatalf("SchemaParams = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Description != want[i].Description || !slices.Equal(got[i].Enum, want[i].Enum) {
			t.Errorf("param %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "null", "not json", `{"properties":[1,2]}`, `"string"`} {
		if got := SchemaParams([]byte(bad)); len(got) != 0 {
			t.Errorf("SchemaParams(%q) = %+v, want none", bad, got)
		}
	}
}

func TestSchemaParamsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"properties":{`)
	for i := range 500 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"p` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `_` + itoa(i) + `":{"type":"string"}`)
	}
	b.WriteString(`}}`)
	if got := SchemaParams([]byte(b.String())); len(got) != maxSchemaParams {
		t.Errorf("got %d params, want the cap %d", len(got), maxSchemaParams)
	}
	deep := strings.Repeat(`{"properties":{"x":`, 50) + `{}` + strings.Repeat(`}}`, 50)
	if got := SchemaParams([]byte(deep)); len(got) > maxSchemaDepth+1 {
		t.Errorf("deep schema gave %d params, want at most %d", len(got), maxSchemaDepth+1)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

func FuzzWords(f *testing.F) {
	for _, s := range []string{"", "get_current_time", "parseHTTPResponse", "github-mcp.create_issue",
		"使用必应搜索", "ab\xffcd", "a._-b", "ǅemo ÀÉ", "\u0301x", strings.Repeat("z", 200), "..--__", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, w := range Words(s) {
			if w.Text == "" {
				t.Fatalf("empty word from %q", s)
			}
			if !utf8.ValidString(w.Text) {
				t.Fatalf("invalid UTF-8 word %q from %q", w.Text, s)
			}
			if len(w.Text) > maxWordLen {
				t.Fatalf("word of %d bytes from %q", len(w.Text), s)
			}
			for _, r := range w.Text {
				if unicode.IsSpace(r) || r == '_' || r == '-' || r == '.' {
					t.Fatalf("separator %q in word %q from %q", r, w.Text, s)
				}
			}
		}
		for _, term := range Terms(s) {
			if term == "" || !utf8.ValidString(term) {
				t.Fatalf("bad term %q from %q", term, s)
			}
		}
		_ = Stem(s)
		_ = SchemaParams([]byte(s))
		// A memo gives what the functions give, on first sight and from memory.
		m := NewMemo()
		for range 2 {
			if got := m.Words(s); !slices.Equal(got, Words(s)) {
				t.Fatalf("memo words of %q: %v, want %v", s, got, Words(s))
			}
			if got := m.Terms(s); !slices.Equal(got, Terms(s)) {
				t.Fatalf("memo terms of %q: %q, want %q", s, got, Terms(s))
			}
		}
	})
}

// TestMemoGivesWhatTheFunctionsGive: texts analysed in turn through one memo (so later ones meet identifiers and
// words the earlier ones left in it) give the words and terms Words and Terms give alone, and a word's flags
// (part, compound) are not taken from another identifier that contains the same word.
func TestMemoGivesWhatTheFunctionsGive(t *testing.T) {
	batch := []string{
		"getUserName returns the user name",
		"user_name: the name of the user; users: the users",
		"getUserName again, and get-user-name, and github-mcp.create_issue",
		"使用必应搜索 and 搜索 again",
		"running runs ran RUNNING",
		"ab\xffcd a._-b ǅemo ÀÉ",
		strings.Repeat("verylongidentifier", 10) + " " + strings.Repeat("verylongidentifier", 10),
		"", "the a an of",
	}
	m := NewMemo()
	for round := range 2 {
		for _, s := range batch {
			if got, want := m.Words(s), Words(s); !slices.Equal(got, want) {
				t.Errorf("round %d, %q: memo words %v, want %v", round, s, got, want)
			}
			if got, want := m.Terms(s), Terms(s); !slices.Equal(got, want) {
				t.Errorf("round %d, %q: memo terms %q, want %q", round, s, got, want)
			}
		}
	}
	var nilMemo *Memo
	if got, want := nilMemo.Terms("getUserName runs"), Terms("getUserName runs"); !slices.Equal(got, want) {
		t.Errorf("nil memo terms %q, want %q", got, want)
	}
}
