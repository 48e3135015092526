package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// ServerCuration is one server's curation as the router and the indexer apply it to the server's stored tools:
// its filter, its overrides by original name and, with pinning on, its pins. It is read from the store whenever the
// server's tools or settings change, never on a call.
type ServerCuration struct {
	policy    persistence.ToolPolicy
	filter    curation.Filter
	overrides curation.Overrides
	pins      persistence.PinSet
	pinBy     map[string]*persistence.ToolPin
}

// NewServerCuration is a server's curation from its policy and its overrides (none: nil); with pinning on, its
// pins are set with SetPins.
func NewServerCuration(policy persistence.ToolPolicy, overrides []persistence.ToolOverride) *ServerCuration {
	c := &ServerCuration{policy: policy, filter: curation.NewFilter(policy.Filter)}
	if len(overrides) > 0 {
		c.overrides = curation.NewOverrides(overrides)
	}
	return c
}

// Pinning reports whether the server's pinning is on (its pins decide what is served).
func (c *ServerCuration) Pinning() bool { return c != nil && c.policy.Pinning }

// SetPins keeps a server's pins for Serve, without the definitions Serve never reads: it reads an approved
// definition only to serve it in place of the stored one, which happens only while a change is held or after one
// was rejected (the discovery saves the pins before it stores the tools, so a stored tool whose definition differs
// from its approved one always has its change recorded). The router keeps every pinned server's pins; at 10,000
// tools their definitions were 14 MB of its live heap.
func (c *ServerCuration) SetPins(set persistence.PinSet) {
	for i := range set.Pins {
		p := &set.Pins[i]
		p.PendingDef = nil
		if p.PendingHash == "" && p.RejectedHash == "" {
			p.ApprovedDef = nil
		}
	}
	c.pins = set
	c.pinBy = make(map[string]*persistence.ToolPin, len(set.Pins))
	for i := range set.Pins {
		c.pinBy[set.Pins[i].OriginalName] = &c.pins.Pins[i]
	}
}

// Plain reports whether the curation changes nothing (the common case: the stored rows are served as they are).
func (c *ServerCuration) Plain() bool {
	return c == nil || !c.filter.Active() && len(c.overrides) == 0 && !c.policy.Pinning
}

// ExposedName is the override's exposed name of a tool ("" when none).
func (c *ServerCuration) ExposedName(original string) string {
	if c == nil {
		return ""
	}
	if o := c.overrides[original]; o != nil && o.ExposedName != nil {
		return *o.ExposedName
	}
	return ""
}

// Serve returns what a server serves of its stored tools (full definitions, as ListTools returns them): hidden
// tools and withheld ones left out, held ones with their approved definition, overrides applied. A row it changes
// is a copy whose DefinitionHash also says what was applied, so that a changed override or approval is seen as a
// changed tool by the router and the indexer. stored is not modified; with nothing to apply it is returned as is.
func (c *ServerCuration) Serve(stored []persistence.Tool, hashes *PinHashes, log *slog.Logger) []persistence.Tool {
	if c.Plain() {
		return stored
	}
	out := make([]persistence.Tool, 0, len(stored))
	for _, t := range stored {
		if c.filter.Hides(t.OriginalName) {
			continue
		}
		if c.policy.Pinning {
			hash := hashes.Of(&t)
			switch curation.Serve(c.policy, &c.pins, c.pinBy[t.OriginalName], hash) {
			case curation.Withhold:
				continue
			case curation.ServeApproved:
				pin := c.pinBy[t.OriginalName]
				if err := approvedRow(&t, pin); err != nil {
					log.Warn("approved tool definition unreadable; withholding the tool", "tool", t.Name, "error", err)
					continue
				}
			}
		}
		if o := c.overrides[t.OriginalName]; o != nil {
			if o.Description != nil {
				t.Description = *o.Description
			}
			if def, err := curation.ApplyDefinition(t.Definition, o); err == nil {
				t.Definition = def
			}
			t.DefinitionHash += "|o:" + overrideKey(o)
		}
		out = append(out, t)
	}
	return out
}

// PinHashes remembers the pin hash of each tool's definition, by server and tool name, for the whole process: the
// discovery computes it for the pins, then the router and the indexer find it for the stored tools, and the reloads
// of a pinned server (one per classified batch) find it again, so that a definition is canonicalised once per
// change instead of three times and more (canonicalising is most of the cost pinning adds to indexing a new
// server). An entry stands while the definition bytes hash to the same 64-bit key. Safe for concurrent use.
type PinHashes struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[string]map[string]pinHashEntry // server id -> original name -> entry
}

type pinHashEntry struct {
	key  uint64
	hash string
}

func NewPinHashes() *PinHashes {
	return &PinHashes{seed: maphash.MakeSeed(), m: map[string]map[string]pinHashEntry{}}
}

// Of returns t's pin hash ("" when its definition cannot be read: never approved).
func (p *PinHashes) Of(t *persistence.Tool) string {
	h, _ := p.Def(t.SourceServerID, t.OriginalName, t.Definition)
	return h
}

// Def returns the pin hash of a server's tool definition, or why it cannot be read (then "", never approved).
func (p *PinHashes) Def(server, name string, def []byte) (string, error) {
	key := maphash.Bytes(p.seed, def)
	p.mu.Lock()
	e, ok := p.m[server][name]
	p.mu.Unlock()
	if ok && e.key == key {
		return e.hash, nil
	}
	h, err := curation.PinHash(def)
	if err != nil {
		h = ""
	}
	p.mu.Lock()
	if p.m[server] == nil {
		p.m[server] = map[string]pinHashEntry{}
	}
	p.m[server][name] = pinHashEntry{key: key, hash: h}
	p.mu.Unlock()
	return h, err
}

// ForgetServer drops the entries of a removed server's tools.
func (p *PinHashes) ForgetServer(id string) {
	p.mu.Lock()
	delete(p.m, id)
	p.mu.Unlock()
}

// approvedRow puts a pin's approved definition in place of the row's current one.
func approvedRow(t *persistence.Tool, pin *persistence.ToolPin) error {
	var def struct {
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if err := json.Unmarshal(pin.ApprovedDef, &def); err != nil {
		return fmt.Errorf("decode approved definition: %w", err)
	}
	if len(def.InputSchema) == 0 || string(def.InputSchema) == "null" {
		def.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	t.Description, t.InputSchema, t.Definition = def.Description, def.InputSchema, pin.ApprovedDef
	t.DefinitionHash = "a:" + pin.ApprovedHash
	return nil
}

func overrideKey(o *persistence.ToolOverride) string {
	b, _ := json.Marshal(struct {
		N, D *string
		A    *persistence.ToolAnnotations
	}{o.ExposedName, o.Description, o.Annotations})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
