package embed

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		vec  []float32
		dim  int
		ok   bool
	}{
		{"valid", []float32{0.6, 0.8, 0}, 3, true},
		{"negative components", []float32{-1, 0, 0}, 3, true},
		{"too short", []float32{1, 0}, 3, false},
		{"too long", []float32{1, 0, 0, 0}, 3, false},
		{"nil", nil, 3, false},
		{"all zeros", []float32{0, 0, 0}, 3, false},
		{"NaN", []float32{1, nan, 0}, 3, false},
		{"+Inf", []float32{inf, 0, 0}, 3, false},
		{"-Inf", []float32{0, -inf, 0}, 3, false},
		{"dimension zero", nil, 0, false},
		{"negative dimension", []float32{1}, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.vec, tt.dim)
			if tt.ok && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidVector) {
				t.Fatalf("Validate = %v, want ErrInvalidVector", err)
			}
		})
	}
}

func TestValidateAll(t *testing.T) {
	good := []float32{1, 0}
	if err := ValidateAll([][]float32{good, good}, 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := ValidateAll([][]float32{good}, 2, 2); !errors.Is(err, ErrInvalidVector) {
		t.Errorf("one vector for two texts: %v", err)
	}
	err := ValidateAll([][]float32{good, {0, 0}}, 2, 2)
	if !errors.Is(err, ErrInvalidVector) || !strings.Contains(err.Error(), "vector 1") {
		t.Errorf("zero second vector: %v", err)
	}
}

func TestNormalize(t *testing.T) {
	v := Normalize([]float32{3, 4})
	if math.Abs(float64(v[0])-0.6) > 1e-6 || math.Abs(float64(v[1])-0.8) > 1e-6 {
		t.Errorf("Normalize(3,4) = %v", v)
	}
	if z := Normalize([]float32{0, 0}); z[0] != 0 || z[1] != 0 {
		t.Errorf("Normalize(0,0) = %v", z)
	}
}

func TestToolText(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"title":{"type":"string","description":"Issue\ntitle"},` +
		`"repo":{"type":"string"},"state":{"enum":["open","closed"]}}}`)
	got := ToolText("github.create_issue", "Create a new\n\n GitHub   issue.", schema)
	want := "name: github.create_issue\n" +
		"description: Create a new GitHub issue.\n" +
		"parameters: repo; state (open, closed); title: Issue title"
	if got != want {
		t.Errorf("ToolText =\n%s\nwant\n%s", got, want)
	}
	if got := ToolText("x.y", "", nil); got != "name: x.y" {
		t.Errorf("ToolText without description and schema = %q", got)
	}
	long := ToolText("x.y", strings.Repeat("é", 3000), nil)
	if len(long) > len("name: x.y\ndescription: ")+maxDescriptionChars || !strings.HasSuffix(long, "é") {
		t.Errorf("long description not cut on a rune boundary to %d bytes: %d", maxDescriptionChars, len(long))
	}
}

func TestHashedBasics(t *testing.T) {
	h := NewHashed(0)
	if h.Dimension() != DefaultHashedDimension || h.Model() != HashedModel {
		t.Fatalf("NewHashed(0) = %s/%d", h.Model(), h.Dimension())
	}
	texts := []string{"", "   ", "!!!", "the of and", "get weather forecast", "获取天气预报", "\xff\xfe", ToolText("a.b", "c", nil)}
	vecs, err := NewHashed(256).Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vecs {
		if err := Validate(v, 256); err != nil {
			t.Errorf("text %q: %v", texts[i], err)
		}
		var norm float64
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-4 {
			t.Errorf("text %q: norm² %v, want 1", texts[i], norm)
		}
	}
	again, _ := NewHashed(256).Embed(context.Background(), texts)
	for i := range vecs {
		for k := range vecs[i] {
			if vecs[i][k] != again[i][k] {
				t.Fatalf("text %q: not deterministic", texts[i])
			}
		}
	}
}

func cos(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestHashedSimilarity(t *testing.T) {
	h := NewHashed(0)
	geocode := h.Vector(ToolText("osm.geocode_address", "Convert an address into geographic coordinates",
		[]byte(`{"properties":{"address":{"description":"The address to geocode"}}}`)))
	stock := h.Vector(ToolText("finance.get_stock_price", "Get the current price of a stock ticker",
		[]byte(`{"properties":{"ticker":{"description":"Stock symbol"}}}`)))
	tests := []struct {
		query       string
		near, far   []float32
		nearN, farN string
	}{
		{"geocoding addresses to coordinates", geocode, stock, "geocode", "stock"},
		{"what is the stock price of Apple", stock, geocode, "stock", "geocode"},
		{"geocodeAddress", geocode, stock, "geocode", "stock"},
	}
	for _, tt := range tests {
		q := h.Vector(tt.query)
		if a, b := cos(q, tt.near), cos(q, tt.far); a <= b {
			t.Errorf("%q: cos to %s %.3f <= cos to %s %.3f", tt.query, tt.nearN, a, tt.farN, b)
		}
	}
	// The name line weighs more than the parameters line.
	name := h.Vector("name: weather\nparameters: city")
	param := h.Vector("name: city\nparameters: weather")
	q := h.Vector("weather")
	if cos(q, name) <= cos(q, param) {
		t.Errorf("a word in the name should count more than in the parameters")
	}
}

func TestHashedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewHashed(64).Embed(ctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Embed with a cancelled context = %v", err)
	}
}

func TestHashedConcurrent(t *testing.T) {
	h := NewHashed(128)
	want := h.Vector("concurrent embedding")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				v := h.Vector("concurrent embedding")
				for k := range v {
					if v[k] != want[k] {
						t.Error("different vector under concurrency")
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestWordVectorsTable(t *testing.T) {
	wv, err := parseWordVectors(wordVecData)
	if err != nil {
		t.Fatal(err)
	}
	if wv.dim != 100 || wv.n != 40000 || len(wv.values) != 40000*100 {
		t.Fatalf("table of %d words, %d dimensions, %d values", wv.n, wv.dim, len(wv.values))
	}
	for _, w := range []string{"weather", "email", "file", "translate"} {
		if _, ok := wv.lookup(w); !ok {
			t.Errorf("common word %q missing", w)
		}
	}
	// Every word is found at its own index through the hash table, and nothing else is found.
	for i := range wv.n {
		if j, ok := wv.lookup(wv.word(i)); !ok || j != i {
			t.Fatalf("word %d %q: lookup gives %d, %v", i, wv.word(i), j, ok)
		}
	}
	for _, w := range []string{"", "weatherx", "zzqqzz", "Weather"} {
		if i, ok := wv.lookup(w); ok {
			t.Errorf("%q found as word %d %q", w, i, wv.word(i))
		}
	}
	if _, err := parseWordVectors(wordVecData[:len(wordVecData)/2]); err == nil {
		t.Error("a truncated table parses")
	}
	if _, err := parseWordVectors(wordVecData[:len(wordVecData)-1]); err == nil {
		t.Error("a table missing its last byte parses")
	}
}

// TestHashedWordVectors checks what the word-vector part adds: texts that share no word but a meaning are closer
// than unrelated ones, which hashed features alone cannot see.
func TestHashedWordVectors(t *testing.T) {
	tests := []struct{ query, near, far string }{
		{"will it rain tomorrow", "name: get_forecast\ndescription: weather forecast for a city", "name: get_quote\ndescription: stock price of a company"},
		{"send a message to my colleague", "name: compose_mail\ndescription: write an email", "name: resize\ndescription: scale a picture"},
	}
	for _, share := range []float64{0, DefaultWordShare} {
		h := NewHashedMix(512, share)
		for _, tt := range tests {
			q := h.Vector(tt.query)
			near, far := cos(q, h.Vector(tt.near)), cos(q, h.Vector(tt.far))
			if share == 0 && math.Abs(near-far) > 0.1 {
				t.Errorf("hashed only, %q: cos %.3f vs %.3f, want both near 0 (no shared word)", tt.query, near, far)
			}
			if share > 0 && near <= far+0.05 {
				t.Errorf("with word vectors, %q: cos to the related tool %.3f, to the unrelated %.3f", tt.query, near, far)
			}
		}
	}
	if NewHashedMix(512, 0.3).Model() == HashedModel || NewHashed(0).Model() != HashedModel || NewHashed(64).Model() != HashedModel {
		t.Error("Model must name the word-vector share when it is not the default")
	}
}
