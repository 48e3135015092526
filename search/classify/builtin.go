package classify

import (
	"context"
	"fmt"
	"math"
	"sync"
)

// Embedder turns texts into vectors of one space (search/embed's embedders satisfy it).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Builtin classifies by embedding similarity: a tool gets the skills whose vectors are unusually close to its own.
// A skill's vector starts as the embedding of its name and description and can be moved towards the centroid of
// the tools classified into it (SetSkillVector), so skills sharpen as servers are added.
//
// Calibration: raw cosine similarities are not comparable across tools (a long description is close to
// everything), so each similarity is turned into a z-score against the tool's similarities to all skills, and
// the confidence is a logistic of it, centred so that a skill 1.5 standard deviations above the tool's mean scores
// 0.5 and one 3 above scores about 0.95. A tool that stands out for no skill gets none.
type Builtin struct {
	emb  Embedder
	tax  *Taxonomy
	text func(Tool) string

	mu   sync.RWMutex
	vecs [][]float32 // by taxonomy index
	desc [][]float32 // description embeddings, the fallback of an empty skill
}

// Calibration of Builtin (see its doc).
const (
	zCentre = 1.5
	zSlope  = 2.0
)

// NewBuiltin embeds the taxonomy's skills. text builds a tool's embedding text (nil: name and description).
func NewBuiltin(ctx context.Context, emb Embedder, tax *Taxonomy, text func(Tool) string) (*Builtin, error) {
	if text == nil {
		text = func(t Tool) string { return t.Name + "\n" + t.Description }
	}
	texts := make([]string, len(tax.Skills))
	for i, s := range tax.Skills {
		texts[i] = SkillText(s)
	}
	vecs, err := emb.Embed(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("embed skills: %w", err)
	}
	if len(vecs) != len(texts) {
		return nil, fmt.Errorf("embed skills: %d vectors for %d skills", len(vecs), len(texts))
	}
	desc := make([][]float32, len(vecs))
	copy(desc, vecs)
	return &Builtin{emb: emb, tax: tax, text: text, vecs: vecs, desc: desc}, nil
}

// SkillText is the text a skill is embedded from.
func SkillText(s Skill) string { return s.Name + ": " + s.Description }

// Name implements Classifier.
func (b *Builtin) Name() string { return "builtin" }

// SkillVector returns a skill's current vector.
func (b *Builtin) SkillVector(id string) ([]float32, bool) {
	i, ok := b.tax.byID[id]
	if !ok {
		return nil, false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.vecs[i], true
}

// SetSkillVector replaces a skill's vector (BR-008: recomputed when its tools change); nil restores the embedding
// of its description, which is what an empty skill falls back to.
func (b *Builtin) SetSkillVector(id string, v []float32) error {
	i, ok := b.tax.byID[id]
	if !ok {
		return fmt.Errorf("unknown skill %q", id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if v == nil {
		b.vecs[i] = b.desc[i]
		return nil
	}
	if len(v) != len(b.desc[i]) {
		return fmt.Errorf("skill %s: vector of %d dimensions, want %d", id, len(v), len(b.desc[i]))
	}
	b.vecs[i] = v
	return nil
}

// Classify implements Classifier.
func (b *Builtin) Classify(ctx context.Context, tool Tool) (Result, error) {
	vecs, err := b.emb.Embed(ctx, []string{b.text(tool)})
	if err != nil {
		return Result{}, fmt.Errorf("embed tool: %w", err)
	}
	if len(vecs) != 1 {
		return Result{}, fmt.Errorf("embed tool: %d vectors for 1 text", len(vecs))
	}
	return b.ClassifyVector(vecs[0])
}

// ClassifyVector classifies an already embedded tool.
func (b *Builtin) ClassifyVector(v []float32) (Result, error) {
	b.mu.RLock()
	sims := make([]float64, len(b.vecs))
	for i, s := range b.vecs {
		sims[i] = cosine(v, s)
	}
	b.mu.RUnlock()
	mean, sd := meanStd(sims)
	if sd == 0 {
		return Result{}, nil // identical to every skill: it stands out for none
	}
	as := make([]Assignment, len(sims))
	for i, s := range sims {
		z := (s - mean) / sd
		as[i] = Assignment{SkillID: b.tax.Skills[i].ID, Confidence: 1 / (1 + math.Exp(-zSlope*(z-zCentre)))}
	}
	return b.tax.apply(as)
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

func meanStd(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)))
}

// Centroid averages vectors (a skill's tools) and mixes in the description vector with weight 1, so a skill with
// few tools keeps its meaning; it returns nil for no vectors.
func Centroid(desc []float32, tools [][]float32) []float32 {
	if len(tools) == 0 {
		return nil
	}
	out := make([]float64, len(desc))
	for i, x := range desc {
		out[i] = float64(x)
	}
	for _, v := range tools {
		for i := range out {
			if i < len(v) {
				out[i] += float64(v[i])
			}
		}
	}
	var norm float64
	for _, x := range out {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	res := make([]float32, len(out))
	for i, x := range out {
		if norm > 0 {
			res[i] = float32(x / norm)
		}
	}
	return res
}
