package curation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/internal/canonjson"
	"github.com/mcpgw/aggregator/persistence"
)

// PinnedFields are the members of a tool definition its pin hash covers: what a model reads to decide what a tool
// does and how to call it. Anything else (_meta, icons, execution hints) may change without approval.
var pinnedFields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// PinHash is the hex SHA-256 of a tool definition's pinned fields in canonical JSON (object keys sorted, numbers
// as written, insignificant whitespace dropped): two definitions that mean the same hash the same.
func PinHash(def json.RawMessage) (string, error) {
	// canonjson gives encoding/json's bytes (sorted keys, HTML escaped, numbers as written) without decoding into
	// maps; stored pins hold hashes computed with encoding/json, and FuzzPinHash holds the two equal.
	b, err := canonjson.AppendFields(make([]byte, 0, len(def)+2), def, pinnedFields)
	if err != nil {
		return "", fmt.Errorf("decode tool definition: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Listed is one tool as a backend listed it, with its pin hash.
type Listed struct {
	Name string
	Def  json.RawMessage
	Hash string
}

// Change kinds of a held change.
const (
	ChangeChanged = "changed" // an approved tool's definition changed
	ChangeNew     = "new"     // a tool that was never approved (new since approval, or renamed on the backend)
)

// Held is a change a discovery put on hold (for the log line and the metric).
type Held struct {
	Name string
	Kind string
	Hash string
}

// Decision is what a discovery does to a server's pins: the complete next set of pins, and the changes it newly
// put on hold (a change already pending, or rejected before, is not announced again).
type Decision struct {
	Pins    []persistence.ToolPin
	Held    []Held
	Changed bool // Pins differ from the pins it was decided from
}

// Decide applies the pinning rules to what a backend listed, given the server's policy and its pins (set.Version
// 0 means no discovery ever recorded pins: the first one approves everything listed as the baseline, since the
// admin who registered the server with pinning on approved what it offered then):
//   - a tool whose hash is the approved one is served as it is, and any pending change of it is dropped;
//   - an approved tool whose hash differs is held: the approved definition keeps being served, the new one is
//     pending (unless it is the one an admin rejected);
//   - a tool never approved is new: with PinNewTools "serve" it is approved on first sight; otherwise it is
//     withheld and pending (unless rejected);
//   - a pin of a tool no longer listed keeps its approved definition (if it comes back unchanged it is served at
//     once) and loses its pending change; one that was never approved nor rejected is dropped.
func Decide(now time.Time, serverID string, policy persistence.ToolPolicy, set persistence.PinSet, listed []Listed) Decision {
	byName := make(map[string]persistence.ToolPin, len(set.Pins))
	for _, p := range set.Pins {
		byName[p.OriginalName] = p
	}
	baseline := set.Version == 0
	serveNew := policy.PinNewTools == persistence.PinNewServe
	var d Decision
	seen := make(map[string]bool, len(listed))
	for _, l := range listed {
		if seen[l.Name] {
			continue
		}
		seen[l.Name] = true
		p, had := byName[l.Name]
		if !had {
			p = persistence.ToolPin{ServerID: serverID, OriginalName: l.Name}
		}
		switch {
		case p.ApprovedHash == l.Hash:
			p.PendingHash, p.PendingDef, p.PendingSince = "", nil, nil
		case p.ApprovedHash == "" && (baseline || serveNew):
			at := now
			p.ApprovedHash, p.ApprovedDef, p.ApprovedAt = l.Hash, l.Def, &at
			p.PendingHash, p.PendingDef, p.PendingSince, p.RejectedHash = "", nil, nil, ""
		case l.Hash == p.RejectedHash:
			p.PendingHash, p.PendingDef, p.PendingSince = "", nil, nil
		case p.PendingHash != l.Hash:
			at := now
			p.PendingHash, p.PendingDef, p.PendingSince = l.Hash, l.Def, &at
			kind := ChangeChanged
			if p.ApprovedHash == "" {
				kind = ChangeNew
			}
			d.Held = append(d.Held, Held{Name: l.Name, Kind: kind, Hash: l.Hash})
		}
		d.Pins = append(d.Pins, p)
	}
	for _, p := range set.Pins {
		if seen[p.OriginalName] {
			continue
		}
		if p.ApprovedHash == "" && p.RejectedHash == "" {
			continue
		}
		p.PendingHash, p.PendingDef, p.PendingSince = "", nil, nil
		d.Pins = append(d.Pins, p)
	}
	sort.Slice(d.Pins, func(i, j int) bool { return d.Pins[i].OriginalName < d.Pins[j].OriginalName })
	d.Changed = !samePins(set.Pins, d.Pins)
	return d
}

func samePins(a, b []persistence.ToolPin) bool {
	if len(a) != len(b) {
		return false
	}
	am := make(map[string]persistence.ToolPin, len(a))
	for _, p := range a {
		am[p.OriginalName] = p
	}
	for _, q := range b {
		p, ok := am[q.OriginalName]
		if !ok || p.ApprovedHash != q.ApprovedHash || p.PendingHash != q.PendingHash || p.RejectedHash != q.RejectedHash {
			return false
		}
	}
	return true
}

// Verdict is what the routing table does with a stored tool of a pinned server.
type Verdict int

// Verdicts.
const (
	ServeCurrent  Verdict = iota // the definition the backend lists now is approved
	ServeApproved                // a change is held: serve the approved definition instead
	Withhold                     // never approved: not listed, searched or callable
)

// Serve decides, from a server's pins, what to serve of a stored tool with the current hash. Pinning off serves
// everything as listed. A tool without a pin is one the discovery has not decided on yet: served on a server
// without pins yet (the coming baseline) or with PinNewTools "serve", withheld otherwise.
func Serve(policy persistence.ToolPolicy, set *persistence.PinSet, pin *persistence.ToolPin, currentHash string) Verdict {
	if !policy.Pinning {
		return ServeCurrent
	}
	switch {
	case pin == nil:
		if set.Version == 0 || policy.PinNewTools == persistence.PinNewServe {
			return ServeCurrent
		}
		return Withhold
	case pin.ApprovedHash == currentHash:
		return ServeCurrent
	case pin.ApprovedHash != "" && len(pin.ApprovedDef) > 0:
		return ServeApproved
	}
	return Withhold
}

// DiffEntry is one difference between two JSON documents, at a JSON pointer (RFC 6901).
type DiffEntry struct {
	Path string `json:"path"`
	Op   string `json:"op"` // add, remove, replace
	From any    `json:"from,omitempty"`
	To   any    `json:"to,omitempty"`
}

// MaxDiffEntries caps a diff (a schema rewritten wholesale is reported as its first differences).
const MaxDiffEntries = 200

// Diff lists the differences between two definitions (of their pinned fields), by JSON pointer, in a stable order.
func Diff(from, to json.RawMessage) ([]DiffEntry, error) {
	a, err := pinnedView(from)
	if err != nil {
		return nil, err
	}
	b, err := pinnedView(to)
	if err != nil {
		return nil, err
	}
	var out []DiffEntry
	diffValue("", a, b, &out)
	return out, nil
}

func pinnedView(def json.RawMessage) (map[string]any, error) {
	out := map[string]any{}
	if len(def) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode tool definition: %w", err)
	}
	for _, k := range pinnedFields {
		if v, ok := m[k]; ok && v != nil {
			out[k] = v
		}
	}
	return out, nil
}

func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func diffValue(at string, a, b any, out *[]DiffEntry) {
	if len(*out) >= MaxDiffEntries {
		return
	}
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(av)+len(bv))
			for k := range av {
				keys = append(keys, k)
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				p := at + "/" + pointerToken(k)
				x, inA := av[k]
				y, inB := bv[k]
				switch {
				case !inB:
					add(out, DiffEntry{Path: p, Op: "remove", From: x})
				case !inA:
					add(out, DiffEntry{Path: p, Op: "add", To: y})
				default:
					diffValue(p, x, y, out)
				}
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			n := max(len(av), len(bv))
			for i := 0; i < n; i++ {
				p := at + "/" + strconv.Itoa(i)
				switch {
				case i >= len(bv):
					add(out, DiffEntry{Path: p, Op: "remove", From: av[i]})
				case i >= len(av):
					add(out, DiffEntry{Path: p, Op: "add", To: bv[i]})
				default:
					diffValue(p, av[i], bv[i], out)
				}
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		add(out, DiffEntry{Path: at, Op: "replace", From: a, To: b})
	}
}

func add(out *[]DiffEntry, e DiffEntry) {
	if len(*out) < MaxDiffEntries {
		*out = append(*out, e)
	}
}
