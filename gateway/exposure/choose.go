package exposure

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// Item is a tool an endpoint may list: the name it is listed and called by, its canonical name (what Usage
// counts), its server and the tokens its definition costs.
type Item struct {
	Alias, Name, Server string
	Tokens              int
}

// Order is the catalogue's listing order when not everything fits: the most used tools first (weight, highest
// first), then the others taken one per server in turn, each server's in the given order, so that every server
// shows its first tools before any shows more. items is not changed.
func Order(items []Item, weight func(name string) float64) []Item {
	type ranked struct {
		Item
		w     float64
		round int // the tool's place within its server
		first int // its server's first place in items
	}
	firstOf := map[string]int{}
	seen := map[string]int{}
	rs := make([]ranked, len(items))
	for i, it := range items {
		if _, ok := firstOf[it.Server]; !ok {
			firstOf[it.Server] = i
		}
		rs[i] = ranked{Item: it, round: seen[it.Server], first: firstOf[it.Server]}
		seen[it.Server]++
		if weight != nil {
			rs[i].w = weight(it.Name)
		}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		if c := cmp.Compare(a.round, b.round); c != 0 {
			return c
		}
		return cmp.Compare(a.first, b.first)
	})
	out := make([]Item, len(rs))
	for i, r := range rs {
		out[i] = r.Item
	}
	return out
}

// Choose takes from ordered what fits in budget tokens: first the tools named in recent (the caller's, newest
// first; names absent from ordered are skipped), then ordered's; a tool that does not fit is passed over for
// smaller ones after it. allowed (nil: all) leaves out what the caller may not see, without spending budget on
// it. more is how many allowed tools were left out.
func Choose(ordered []Item, recent []string, budget int, allowed func(Item) bool) (chosen []Item, more int) {
	taken := make(map[string]bool, len(recent))
	if len(recent) > 0 {
		byName := make(map[string]int, len(recent))
		for _, n := range recent {
			byName[n] = -1
		}
		for i, it := range ordered {
			if _, ok := byName[it.Name]; ok {
				byName[it.Name] = i
			}
		}
		for _, n := range recent {
			i := byName[n]
			if i < 0 || taken[n] {
				continue
			}
			it := ordered[i]
			if (allowed == nil || allowed(it)) && it.Tokens <= budget {
				budget -= it.Tokens
				chosen = append(chosen, it)
				taken[n] = true
			}
		}
	}
	for _, it := range ordered {
		if taken[it.Name] || (allowed != nil && !allowed(it)) {
			continue
		}
		if it.Tokens <= budget {
			budget -= it.Tokens
			chosen = append(chosen, it)
			taken[it.Name] = true
			continue
		}
		more++
	}
	return chosen, more
}

// Usage counts the calls of each tool, catalogue-wide with a half-life so that what is used now outranks what was
// used last month, and remembers each caller's most recently called tools and what its searches found. It is
// bounded: RecentPerCaller names of each kind for each of at most MaxCallers callers (the least recently active one is forgotten first) and one counter per
// tool called. Safe for concurrent use.
type Usage struct {
	halfLife time.Duration
	mu       sync.Mutex
	counts   map[string]decayed
	recent   map[string]*callerUse
	tick     uint64
}

// Bounds of Usage's memory.
const (
	RecentPerCaller = 16
	MaxCallers      = 4096
)

type decayed struct {
	v  float64
	at time.Time
}

type callerUse struct {
	names []string // newest first
	found []string // tools the caller's searches found, newest first (Found)
	tick  uint64   // when the caller last called or searched
}

// NewUsage returns a Usage whose counts halve every halfLife.
func NewUsage(halfLife time.Duration) *Usage {
	return &Usage{halfLife: halfLife, counts: map[string]decayed{}, recent: map[string]*callerUse{}}
}

// Record counts one call of tool by caller at now.
func (u *Usage) Record(caller, tool string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	d := u.counts[tool]
	u.counts[tool] = decayed{v: u.decay(d, now) + 1, at: now}
	u.tick++
	c := u.callerLocked(caller)
	c.tick = u.tick
	if i := slices.Index(c.names, tool); i >= 0 {
		c.names = slices.Delete(c.names, i, i+1)
	}
	c.names = slices.Insert(c.names, 0, tool)
	if len(c.names) > RecentPerCaller {
		c.names = c.names[:RecentPerCaller]
	}
}

// Found remembers tools a search of caller's found (newest first, at most RecentPerCaller), without counting them
// as used: a budgeted listing lists them after the caller's recently called tools, so that a client that calls
// only listed tools can call what it searched for.
func (u *Usage) Found(caller string, tools []string) {
	if len(tools) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tick++
	c := u.callerLocked(caller)
	c.tick = u.tick
	for i := len(tools) - 1; i >= 0; i-- {
		if j := slices.Index(c.found, tools[i]); j >= 0 {
			c.found = slices.Delete(c.found, j, j+1)
		}
		c.found = slices.Insert(c.found, 0, tools[i])
	}
	if len(c.found) > RecentPerCaller {
		c.found = c.found[:RecentPerCaller]
	}
}

// callerLocked is caller's entry, made (and the least recently active one forgotten past MaxCallers) when new.
func (u *Usage) callerLocked(caller string) *callerUse {
	c := u.recent[caller]
	if c == nil {
		if len(u.recent) >= MaxCallers {
			u.forgetOldestCaller()
		}
		c = &callerUse{}
		u.recent[caller] = c
	}
	return c
}

// Recent is caller's most recently called tools, newest first, then the tools its searches found (a copy).
func (u *Usage) Recent(caller string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.recent[caller]; c != nil {
		return slices.Concat(c.names, c.found)
	}
	return nil
}

// Weights is every counted tool's decayed count at now.
func (u *Usage) Weights(now time.Time) map[string]float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]float64, len(u.counts))
	for n, d := range u.counts {
		out[n] = u.decay(d, now)
	}
	return out
}

func (u *Usage) decay(d decayed, now time.Time) float64 {
	if d.v == 0 || u.halfLife <= 0 {
		return d.v
	}
	age := now.Sub(d.at)
	if age <= 0 {
		return d.v
	}
	return d.v * pow2(-float64(age)/float64(u.halfLife))
}

func (u *Usage) forgetOldestCaller() {
	var oldest string
	var tick uint64
	for k, c := range u.recent {
		if oldest == "" || c.tick < tick {
			oldest, tick = k, c.tick
		}
	}
	delete(u.recent, oldest)
}

func pow2(x float64) float64 { return math.Exp2(x) }
