// Command catalog is a stdio MCP server for benchmarks: it serves a generated catalogue of tools whose
// descriptions and input schemas are as long as real MCP tools' (about 1.3 KB of text with the schema), so that
// search latency and memory can be measured at scale without a corpus. The text is composed from a fixed list of
// general English words with a seeded random generator: the same flags give the same tools.
//
// Flags: -tools N (default 1000), -seed S (default 1), -prefix P (default "c"). Every tool's name ends with a word
// made of letters only that no other tool of the same prefix has (its id), so that a benchmark can ask for one
// exact tool. initialize, ping, tools/list (one page) and tools/call (an echo of the tool's name) behave.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// Verbs, nouns and adjectives of general English, with nothing taken from a search fixture.
var (
	verbs = strings.Fields(`get list create update delete find search fetch send read write open close start stop
		check build run move copy merge split sort filter count compare convert export import upload download sync
		schedule cancel share archive restore publish review approve reject assign track measure report plan draw
		translate format parse validate render resize rotate scan print label tag rename lock unlock`)
	nouns = strings.Fields(`account address album answer article asset audio balance batch board book branch budget
		calendar campaign card cart channel chart city client comment company contact contract course customer
		dashboard date deal device document domain draft email employee event expense feed file folder form game
		goal group guide image invoice issue item job key label lead letter library link list location log map
		meeting member message metric model movie note order package page payment person photo place plan player
		playlist policy post price product profile project question quote receipt record recipe region release
		report request review room route rule sale schedule score screen section sensor session shipment site
		song source space station status stock store story subscription survey table task team template ticket
		time track trip user vehicle video wallet weather website window word workflow zone`)
	adjs = strings.Fields(`new old current recent daily weekly monthly public private shared active open closed
		pending final total single multiple local remote external internal primary secondary default custom large
		small full short long simple detailed raw clean empty valid invalid main quick safe secure free paid
		available unread starred archived`)
	fillers = strings.Fields(`the a an of for with from to in on by and or that this each every all any its their
		when if as at into about over after before`)
	types = []string{"string", "string", "string", "integer", "number", "boolean", "array"}
)

type gen struct{ r *rand.Rand }

func (g gen) pick(ws []string) string { return ws[g.r.IntN(len(ws))] }

// sentence composes one sentence of about n words.
func (g gen) sentence(n int) string {
	w := make([]string, 0, n)
	w = append(w, g.pick(verbs))
	for len(w) < n {
		switch g.r.IntN(4) {
		case 0:
			w = append(w, g.pick(fillers))
		case 1:
			w = append(w, g.pick(adjs))
		default:
			w = append(w, g.pick(nouns))
		}
	}
	s := strings.Join(w, " ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func (g gen) paragraph(sentences, words int) string {
	out := make([]string, sentences)
	for i := range out {
		out[i] = g.sentence(words/2 + g.r.IntN(words))
	}
	return strings.Join(out, " ")
}

// id spells n in letters only (a-z), so that text analysis keeps it as one word.
func id(prefix string, n int) string {
	var b []byte
	for {
		b = append(b, byte('a'+n%26))
		n /= 26
		if n == 0 {
			break
		}
	}
	return prefix + "q" + string(b)
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

func (g gen) tool(prefix string, i int) tool {
	name := g.pick(verbs) + "_" + g.pick(adjs) + "_" + g.pick(nouns) + "_" + id(prefix, i)
	props := map[string]any{}
	var required []string
	for p := 0; p < 3+g.r.IntN(4); p++ {
		pname := g.pick(nouns) + "_" + g.pick([]string{"id", "name", "type", "limit", "query", "date", "mode", "path"})
		t := g.pick(types)
		prop := map[string]any{"type": t, "description": g.paragraph(1+g.r.IntN(3), 12)}
		if t == "array" {
			prop["items"] = map[string]any{"type": "string"}
		}
		if t == "string" && g.r.IntN(4) == 0 {
			prop["enum"] = []string{g.pick(adjs), g.pick(adjs), g.pick(adjs)}
		}
		props[pname] = prop
		if g.r.IntN(2) == 0 {
			required = append(required, pname)
		}
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	return tool{Name: name, Description: g.paragraph(2+g.r.IntN(4), 16), InputSchema: schema}
}

func main() {
	n := flag.Int("tools", 1000, "how many tools to serve")
	seed := flag.Uint64("seed", 1, "seed of the generator")
	prefix := flag.String("prefix", "c", "first letters of every tool's id")
	flag.Parse()
	g := gen{r: rand.New(rand.NewPCG(*seed, 0x6d6370))}
	tools := make([]tool, *n)
	for i := range tools {
		tools[i] = g.tool(*prefix, i)
	}
	list, err := json.Marshal(map[string]any{"tools": tools})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"catalog","version":"1"}}`
		case "tools/list":
			result = string(list)
		case "tools/call":
			text, _ := json.Marshal("called " + req.Params.Name)
			result = `{"content":[{"type":"text","text":` + string(text) + `}]}`
		default:
			result = `{}`
		}
		out.WriteString(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + "}\n")
		out.Flush()
	}
}
