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

// SkillSpace holds one vector per skill of a taxonomy and scores a tool or a query against them. A skill's vector
// starts as the embedding of its name and description and can be moved towards the centroid of the tools
// classified into it (SetSkillVector), so skills sharpen as servers are added; an emptied skill falls back to its
// description (BR-008).
//
// Calibration: raw cosine similarities are not comparable across texts (a long description is close to
// everything), so each similarity is turned into a z-score against the text's similarities to all skills, and the
// score is a logistic of it, centred so that a skill 1.5 standard deviations above the text's mean scores 0.5 and
// one 3 above scores about 0.95. A text that stands out for no skill scores low everywhere.
type SkillSpace struct {
	tax  *Taxonomy
	mu   sync.RWMutex
	vecs [][]float32 // by taxonomy index
	desc [][]float32 // description embeddings, the fallback of an empty skill
}

// Calibration of SkillSpace.Scores (see SkillSpace).
const (
	zCentre = 1.5
	zSlope  = 2.0
)

// NewSkillSpace embeds the taxonomy's skills.
func NewSkillSpace(ctx context.Context, emb Embedder, tax *Taxonomy) (*SkillSpace, error) {
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
	return &SkillSpace{tax: tax, vecs: vecs, desc: desc}, nil
}

// SkillText is the text a skill is embedded from.
func SkillText(s Skill) string { return s.Name + ": " + s.Description }

// Taxonomy is the space's taxonomy.
func (sp *SkillSpace) Taxonomy() *Taxonomy { return sp.tax }

// SkillVector returns a skill's current vector.
func (sp *SkillSpace) SkillVector(id string) ([]float32, bool) {
	i, ok := sp.tax.byID[id]
	if !ok {
		return nil, false
	}
	sp.mu.RLock()
	defer sp.mu.RUnlock()
	return sp.vecs[i], true
}

// DescriptionVector returns the embedding of a skill's own description.
func (sp *SkillSpace) DescriptionVector(id string) ([]float32, bool) {
	i, ok := sp.tax.byID[id]
	if !ok {
		return nil, false
	}
	return sp.desc[i], true
}

// SetSkillVector replaces a skill's vector; nil restores the embedding of its description.
func (sp *SkillSpace) SetSkillVector(id string, v []float32) error {
	i, ok := sp.tax.byID[id]
	if !ok {
		return fmt.Errorf("unknown skill %q", id)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if v == nil {
		sp.vecs[i] = sp.desc[i]
		return nil
	}
	if len(v) != len(sp.desc[i]) {
		return fmt.Errorf("skill %s: vector of %d dimensions, want %d", id, len(v), len(sp.desc[i]))
	}
	sp.vecs[i] = v
	return nil
}

// Scores returns every skill's calibrated score (0..1) for an embedded text, in taxonomy order. A text equally
// close to every skill scores 0 everywhere.
func (sp *SkillSpace) Scores(v []float32) []Assignment {
	sp.mu.RLock()
	sims := make([]float64, len(sp.vecs))
	for i, s := range sp.vecs {
		sims[i] = cosine(v, s)
	}
	sp.mu.RUnlock()
	out := make([]Assignment, len(sims))
	mean, sd := meanStd(sims)
	for i, s := range sims {
		out[i].SkillID = sp.tax.Skills[i].ID
		if sd > 0 {
			z := (s - mean) / sd
			out[i].Confidence = 1 / (1 + math.Exp(-zSlope*(z-zCentre)))
		}
	}
	return out
}

// Builtin classifies by embedding similarity in a SkillSpace: a tool gets the skills whose vectors are unusually
// close to its own (see SkillSpace for the calibration), under the rules of BR-004.
type Builtin struct {
	*SkillSpace
	emb  Embedder
	text func(Tool) string
}

// NewBuiltin embeds the taxonomy's skills. text builds a tool's embedding text (nil: name and description).
func NewBuiltin(ctx context.Context, emb Embedder, tax *Taxonomy, text func(Tool) string) (*Builtin, error) {
	if text == nil {
		text = func(t Tool) string { return t.Name + "\n" + t.Description }
	}
	sp, err := NewSkillSpace(ctx, emb, tax)
	if err != nil {
		return nil, err
	}
	return &Builtin{SkillSpace: sp, emb: emb, text: text}, nil
}

// Name implements Classifier.
func (b *Builtin) Name() string { return "builtin" }

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

// ClassifyVector classifies an already embedded text by the rules of BR-004 (see Result): the skills whose scores
// in this space reach MinConfidence, at most MaxSkills, highest first.
func (sp *SkillSpace) ClassifyVector(v []float32) (Result, error) {
	return sp.tax.apply(sp.Scores(v))
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

// UnitVector scales a sum of vectors (a skill's description and its tools' vectors, accumulated by whoever tracks
// them) to unit length as float32: the centroid a skill vector moves to. nil stays nil; a zero sum gives zeros.
func UnitVector(sum []float64) []float32 {
	if sum == nil {
		return nil
	}
	var norm float64
	for _, x := range sum {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, len(sum))
	for i, x := range sum {
		if norm > 0 {
			out[i] = float32(x / norm)
		}
	}
	return out
}
