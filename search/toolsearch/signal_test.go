package toolsearch

import "testing"

// TestSkillSignal: the boost's signal is the best product of the query's and the tool's scores over the skills
// they share, 0 when they share none, and never above 1.
func TestSkillSignal(t *testing.T) {
	query := []float64{0, 0.9, 0.5, 0}
	tests := []struct {
		name    string
		profile []skillAffinity
		want    float64
	}{
		{"no profile", nil, 0},
		{"no shared skill", []skillAffinity{{skill: 0, score: 1}, {skill: 3, score: 0.8}}, 0},
		{"one shared skill", []skillAffinity{{skill: 2, score: 0.8}}, 0.4},
		{"best shared skill wins", []skillAffinity{{skill: 2, score: 1}, {skill: 1, score: 0.6}}, 0.54},
		{"skill beyond the taxonomy", []skillAffinity{{skill: 9, score: 1}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := skillSignal(query, tc.profile)
			if d := got - tc.want; d > 1e-6 || d < -1e-6 || got > 1 {
				t.Errorf("skillSignal = %v, want %v", got, tc.want)
			}
		})
	}
}
