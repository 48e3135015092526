package embed

import (
	"encoding/json"
	"strings"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// Labels of the lines of ToolText. The built-in embedder weighs each line by its label; model embedders read them
// as plain text.
const (
	labelName        = "name: "
	labelDescription = "description: "
	labelParameters  = "parameters: "
)

// Bounds on the parts of ToolText, so that one verbose tool cannot exceed a model's input limit.
const (
	maxDescriptionChars = 2000
	maxParametersChars  = 2000
)

// ToolText builds the text a tool is embedded from: its (namespaced) name, its description and its parameters'
// names and descriptions, one labelled line each. Tool search and the skills classifier both embed tools through
// it, so tools, skills and queries share one vector space.
func ToolText(name, description string, inputSchema json.RawMessage) string {
	var b strings.Builder
	b.WriteString(labelName)
	b.WriteString(oneLine(name, 200))
	if d := oneLine(description, maxDescriptionChars); d != "" {
		b.WriteString("\n" + labelDescription)
		b.WriteString(d)
	}
	if p := ParamsText(inputSchema); p != "" {
		b.WriteString("\n" + labelParameters)
		b.WriteString(oneLine(p, maxParametersChars))
	}
	return b.String()
}

// ParamsText renders the parameters of an input schema as "name: description (enum values); ...". It is the
// parameter part of ToolText, exported for indexes that weigh parameters separately.
func ParamsText(inputSchema json.RawMessage) string {
	params := analysis.SchemaParams(inputSchema)
	var b strings.Builder
	for i, p := range params {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Name)
		if p.Description != "" {
			b.WriteString(": ")
			b.WriteString(p.Description)
		}
		if len(p.Enum) > 0 {
			b.WriteString(" (")
			b.WriteString(strings.Join(p.Enum, ", "))
			b.WriteString(")")
		}
	}
	return b.String()
}

// oneLine collapses all white space (including newlines, which separate ToolText's fields) to single spaces and
// cuts the result to at most max bytes on a rune boundary.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= max {
		return s
	}
	for max > 0 && (s[max]&0xC0) == 0x80 {
		max--
	}
	return s[:max]
}
