// Package classify assigns tools to skills (BR-004): the skills taxonomy that ships with the product (editable, loaded
// from a file), the rules every classification follows (1-3 skills, confidence >= 0.5, primary = highest), a
// built-in classifier that needs no model (similarity of tool and skill embeddings, calibrated to confidences) and
// an LLM classifier over an OpenAI-compatible chat completions endpoint with a validated JSON-schema answer, and the
// decisions of a pool that classifies many tools in the background (Queue: at most N at once, failed tools retried
// when the classifier recovers), which the aggregator's classifier actor runs.
package classify

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
)

//go:embed skills.json
var defaultSkills []byte

// Skill is one entry of the taxonomy.
type Skill struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Taxonomy is the set of skills tools are classified into.
type Taxonomy struct {
	Version int     `json:"version"`
	Skills  []Skill `json:"skills"`
	byID    map[string]int
}

var skillID = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// DefaultTaxonomy is the taxonomy that ships with the product.
func DefaultTaxonomy() *Taxonomy {
	t, err := ParseTaxonomy(defaultSkills)
	if err != nil {
		panic(fmt.Errorf("embedded skills.json: %w", err)) // a build defect, caught by the tests
	}
	return t
}

// LoadTaxonomy reads a taxonomy file (the format of skills.json).
func LoadTaxonomy(path string) (*Taxonomy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read skills file: %w", err)
	}
	t, err := ParseTaxonomy(b)
	if err != nil {
		return nil, fmt.Errorf("skills file %s: %w", path, err)
	}
	return t, nil
}

// ParseTaxonomy decodes and checks a taxonomy: 1 to 200 skills with unique snake_case ids, names and descriptions.
func ParseTaxonomy(b []byte) (*Taxonomy, error) {
	var t Taxonomy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("decode taxonomy: %w", err)
	}
	if len(t.Skills) == 0 || len(t.Skills) > 200 {
		return nil, fmt.Errorf("a taxonomy has 1 to 200 skills, this one %d", len(t.Skills))
	}
	t.byID = make(map[string]int, len(t.Skills))
	for i, s := range t.Skills {
		switch {
		case !skillID.MatchString(s.ID):
			return nil, fmt.Errorf("skill %d: id %q is not snake_case (^[a-z][a-z0-9_]{0,63}$)", i, s.ID)
		case s.Name == "" || s.Description == "":
			return nil, fmt.Errorf("skill %s: name and description are required", s.ID)
		}
		if _, dup := t.byID[s.ID]; dup {
			return nil, fmt.Errorf("skill id %s appears twice", s.ID)
		}
		t.byID[s.ID] = i
	}
	return &t, nil
}

// Skill returns the skill with this id.
// Index returns a skill's position in Skills (the order of SkillSpace.Scores).
func (t *Taxonomy) Index(id string) (int, bool) {
	i, ok := t.byID[id]
	return i, ok
}

func (t *Taxonomy) Skill(id string) (Skill, bool) {
	i, ok := t.byID[id]
	if !ok {
		return Skill{}, false
	}
	return t.Skills[i], true
}

// Tool is what a classifier sees of a tool.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// Assignment is one skill given to a tool with a confidence in [0,1].
type Assignment struct {
	SkillID    string  `json:"skill_id"`
	Confidence float64 `json:"confidence"`
}

// Result is a classification after the rules: at most MaxSkills assignments with confidence >= MinConfidence,
// highest first; Primary is the first one's skill. An empty result means the tool fits no skill well enough.
type Result struct {
	Assignments []Assignment
	Primary     string
}

// The classification rules of BR-004.
const (
	MinConfidence = 0.5
	MaxSkills     = 3
)

// SkillIDs lists the assigned skills, highest confidence first.
func (r Result) SkillIDs() []string {
	out := make([]string, len(r.Assignments))
	for i, a := range r.Assignments {
		out[i] = a.SkillID
	}
	return out
}

// Classifier assigns skills to a tool.
type Classifier interface {
	// Name identifies the classifier in logs and metrics ("builtin", "llm").
	Name() string
	// Classify returns the tool's skills; an error means the classifier could not answer (the tool stays
	// UNCLASSIFIED and is retried later), not that the tool fits no skill.
	Classify(ctx context.Context, tool Tool) (Result, error)
}

// ErrInvalidAnswer means a classifier's answer broke the rules (unknown skill, bad confidence, bad JSON).
var ErrInvalidAnswer = errors.New("invalid classification answer")

// apply keeps valid assignments with confidence >= MinConfidence, at most MaxSkills, highest first. Unknown
// skill ids or confidences outside [0,1] are ErrInvalidAnswer.
func (t *Taxonomy) apply(in []Assignment) (Result, error) {
	seen := map[string]bool{}
	var keep []Assignment
	for _, a := range in {
		if _, ok := t.byID[a.SkillID]; !ok {
			return Result{}, fmt.Errorf("unknown skill %q: %w", a.SkillID, ErrInvalidAnswer)
		}
		if a.Confidence < 0 || a.Confidence > 1 || a.Confidence != a.Confidence {
			return Result{}, fmt.Errorf("confidence %v of %s outside [0,1]: %w", a.Confidence, a.SkillID, ErrInvalidAnswer)
		}
		if seen[a.SkillID] {
			continue
		}
		seen[a.SkillID] = true
		if a.Confidence >= MinConfidence {
			keep = append(keep, a)
		}
	}
	sort.SliceStable(keep, func(i, j int) bool { return keep[i].Confidence > keep[j].Confidence })
	if len(keep) > MaxSkills {
		keep = keep[:MaxSkills]
	}
	r := Result{Assignments: keep}
	if len(keep) > 0 {
		r.Primary = keep[0].SkillID
	}
	return r, nil
}
