package validate

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// The mcpServers file: the server list desktop MCP clients keep. Claude Desktop and Cursor write
// {"mcpServers": {"name": {...}}}, VS Code writes {"servers": {"name": {...}}} (in .vscode/mcp.json, or under "mcp"
// in its settings.json). Each entry is a stdio command (command, args, env, cwd) or a URL (url, headers) whose
// "type" says sse or http. Import turns every entry into a registration and runs it through Registration, so an
// imported server obeys exactly the rules of POST /servers; Export (in http/api) writes the other direction.

// MaxImportEntries bounds the servers one import file may hold (MCP_AGGREGATOR_MAX_SERVERS bounds what registers).
const MaxImportEntries = 1000

// ImportFormats are the top-level keys an import file may hold its servers under, in the order they are looked
// for: "mcpServers" (Claude Desktop, Cursor, Windsurf, Cline) and "servers" (VS Code's mcp.json).
var ImportFormats = []string{"mcpServers", "servers"}

// ImportEntry is one server of an import file, converted.
type ImportEntry struct {
	// SourceName is the entry's key as written in the file; Name is it normalised to the name rule
	// (NormalizeName), "" when nothing of it survives.
	SourceName string
	Name       string
	// TransportType is the transport read from the entry ("" when it could not be told).
	TransportType string
	// Request is the registration, complete but for Actor and IP, when Errors is empty.
	Request gateway.RegisterRequest
	// Errors are the entry's problems, located in the file (["body", format, SourceName, field...]).
	Errors []FieldError
	// Ignored lists the entry's keys the aggregator has no use for (autoApprove, timeout, ...), sorted.
	Ignored []string
}

// Reason is the entry's errors as one sentence ("" when it has none).
func (e ImportEntry) Reason() string {
	msgs := make([]string, 0, len(e.Errors))
	for _, fe := range e.Errors {
		parts := make([]string, 0, len(fe.Loc))
		if len(fe.Loc) > 3 { // ["body", format, SourceName, field...]
			for _, p := range fe.Loc[3:] {
				parts = append(parts, fmt.Sprint(p))
			}
		}
		if len(parts) == 0 {
			msgs = append(msgs, fe.Msg)
		} else {
			msgs = append(msgs, strings.Join(parts, ".")+": "+fe.Msg)
		}
	}
	return strings.Join(msgs, "; ")
}

// ImportFile is a parsed import file.
type ImportFile struct {
	// Format is the top-level key the servers were under ("mcpServers" or "servers").
	Format string
	// DryRun is the file's own "dry_run": true (a query parameter may also ask for it).
	DryRun bool
	// Entries are the servers in file order.
	Entries []ImportEntry
}

// entryKeys are the keys of an entry the aggregator reads; everything else is reported in ImportEntry.Ignored.
var entryKeys = map[string]bool{"type": true, "transport": true, "command": true, "args": true, "env": true,
	"cwd": true, "url": true, "serverUrl": true, "headers": true, "description": true, "disabled": true,
	"credential_mode": true, "user_credential": true}

// vscodeEnvRef is VS Code's ${env:NAME}, which means what ${NAME} means to the aggregator.
var vscodeEnvRef = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)

// vscodeVariable is any other VS Code variable with a colon (${input:id}, ${config:x}, ${command:x}): the editor
// resolves them (an input prompts the user); the daemon cannot.
var vscodeVariable = regexp.MustCompile(`\$\{[A-Za-z]+:[^}]*\}`)

// Import reads an mcpServers (or VS Code servers) file. Problems of the file as a whole (not JSON, no server
// list, too many servers) are returned as field errors and no entry; problems of one entry (an unknown transport,
// a missing command, a bad URL, a name another entry also normalises to) are that entry's Errors, and the other
// entries stand. Each valid entry's Request has passed Registration with checks. It is pure and safe on any input.
func Import(body []byte, checks connconfig.Checks) (ImportFile, []FieldError) {
	v := strictjson.New("body")
	members, ok := v.Object(body)
	if !ok {
		return ImportFile{}, v.Errors()
	}
	fields := v.Index(members, v.At())
	var out ImportFile
	if raw, ok := fields["dry_run"]; ok {
		out.DryRun, _ = v.Bool(raw, v.At("dry_run"))
	}
	var list json.RawMessage
	for _, f := range ImportFormats {
		if raw, ok := fields[f]; ok {
			out.Format, list = f, raw
			break
		}
	}
	if out.Format == "" {
		// VS Code's settings.json keeps the list under "mcp".
		if raw, ok := fields["mcp"]; ok && strictjson.IsObject(raw) {
			if inner, ok := strictjson.ObjectMembers(raw); ok {
				for _, m := range inner {
					if m.Key == "servers" {
						out.Format, list = "servers", m.Value
						break
					}
				}
			}
		}
	}
	if out.Format == "" {
		v.Add(strictjson.FieldMissing, `Field required: the servers go under "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code)`, v.At("mcpServers"))
		return ImportFile{}, v.Errors()
	}
	entries, ok := strictjson.ObjectMembers(list)
	if !ok {
		v.Add(strictjson.FieldTypeError, "Input should be an object of servers by name", v.At(out.Format))
		return ImportFile{}, v.Errors()
	}
	if len(entries) > MaxImportEntries {
		v.Add(strictjson.FieldValueError, fmt.Sprintf("A file may hold at most %d servers", MaxImportEntries), v.At(out.Format))
		return ImportFile{}, v.Errors()
	}
	if v.Count() > 0 {
		return ImportFile{}, v.Errors()
	}

	out.Entries = make([]ImportEntry, 0, len(entries))
	byName := map[string][]int{}
	for _, m := range entries {
		e := importEntry(out.Format, m, checks)
		if e.Name != "" {
			byName[e.Name] = append(byName[e.Name], len(out.Entries))
		}
		out.Entries = append(out.Entries, e)
	}
	// A name two entries share (written twice, or normalised alike) is refused for all of them: which one was
	// meant is the user's call, not the aggregator's.
	for name, idx := range byName {
		if len(idx) < 2 {
			continue
		}
		sources := make([]string, 0, len(idx))
		for _, i := range idx {
			sources = append(sources, fmt.Sprintf("%q", out.Entries[i].SourceName))
		}
		for _, i := range idx {
			e := &out.Entries[i]
			e.Request = gateway.RegisterRequest{}
			e.Errors = append([]FieldError{{Loc: []any{"body", out.Format, e.SourceName}, Type: strictjson.FieldValueError,
				Msg: fmt.Sprintf("Duplicate server name %q in the file (from %s)", name, strings.Join(sources, ", "))}}, e.Errors...)
		}
	}
	return out, nil
}

// importEntry converts one entry of the file.
func importEntry(format string, m strictjson.Member, checks connconfig.Checks) ImportEntry {
	e := ImportEntry{SourceName: m.Key, Name: NormalizeName(m.Key)}
	base := []any{"body", format, m.Key}
	v := strictjson.New(base...)
	fail := func() ImportEntry {
		e.Errors = v.Errors()
		return e
	}
	if e.Name == "" {
		v.Add(strictjson.FieldValueError, "The server name has no letter or digit to build a name from", base)
	}
	members, ok := strictjson.ObjectMembers(m.Value)
	if !ok {
		v.Add(strictjson.FieldTypeError, "Input should be a JSON object describing the server", base)
		return fail()
	}
	fields := v.Index(members, base)
	for _, f := range members {
		if !entryKeys[f.Key] {
			e.Ignored = append(e.Ignored, f.Key)
		}
	}
	sort.Strings(e.Ignored)

	kind := ""
	for _, k := range []string{"type", "transport"} {
		if raw, ok := fields[k]; ok && kind == "" {
			if s, ok := v.String(raw, strictjson.At(base, k)); ok {
				kind = s
			}
		}
	}
	urlKey := "url"
	if _, ok := fields["url"]; !ok {
		if _, ok := fields["serverUrl"]; ok {
			urlKey = "serverUrl" // Windsurf's spelling
		}
	}
	rawURL, hasURL := fields[urlKey]
	_, hasCommand := fields["command"]
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "":
		switch {
		case hasCommand:
			e.TransportType = persistence.TransportSTDIO
		case hasURL:
			e.TransportType = persistence.TransportHTTP
			var u string
			if json.Unmarshal(rawURL, &u) == nil && looksLikeSSE(u) {
				e.TransportType = persistence.TransportSSE
			}
		default:
			v.Add(strictjson.FieldMissing, `A server needs "command" (stdio) or "url" (sse or http)`, base)
		}
	case "stdio":
		e.TransportType = persistence.TransportSTDIO
	case "sse":
		e.TransportType = persistence.TransportSSE
	case "http", "streamable-http", "streamable_http", "streamablehttp":
		e.TransportType = persistence.TransportHTTP
	default:
		v.Add(strictjson.FieldValueError, fmt.Sprintf("Unknown transport %q: want stdio, sse or http", kind), strictjson.At(base, "type"))
	}
	if e.TransportType == "" {
		return fail()
	}

	// The registration's connection_config, from the keys the transport uses; a key of the other kind is an
	// error rather than silently dropped (a "url" on a stdio server says the file is not what it seems).
	cfg := map[string]json.RawMessage{}
	stdioKeys := []string{"command", "args", "env", "cwd"}
	urlKeys := []string{urlKey, "headers"}
	use, refuse := stdioKeys, urlKeys
	if e.TransportType != persistence.TransportSTDIO {
		use, refuse = urlKeys, stdioKeys
	}
	for _, k := range refuse {
		if _, ok := fields[k]; ok {
			v.Add(strictjson.FieldExtraForbidden, fmt.Sprintf("%q is not used by a %s server", k, strings.ToLower(e.TransportType)),
				strictjson.At(base, k))
		}
	}
	for _, k := range use {
		if raw, ok := fields[k]; ok {
			target := k
			if k == urlKey {
				target = "url"
				if e.TransportType == persistence.TransportHTTP {
					target = "base_url"
				}
			}
			value := vscodeEnvRef.ReplaceAll(raw, []byte("$${$1}"))
			if m := vscodeVariable.Find(value); m != nil {
				v.Add(strictjson.FieldValueError, fmt.Sprintf("%s is a VS Code variable the aggregator cannot resolve: "+
					"use ${VAR} (an environment variable of the daemon) instead", m), strictjson.At(base, k))
			}
			cfg[target] = json.RawMessage(value)
		}
	}
	reg := map[string]any{"name": e.Name, "transport_type": e.TransportType, "connection_config": cfg}
	if raw, ok := fields["description"]; ok {
		reg["description"] = raw
	}
	// The aggregator's own per_user fields (issue 28), as its export writes them: checked by Registration.
	for _, k := range []string{"credential_mode", "user_credential"} {
		if raw, ok := fields[k]; ok {
			reg[k] = raw
		}
	}
	if raw, ok := fields["disabled"]; ok {
		if b, ok := v.Bool(raw, strictjson.At(base, "disabled")); ok {
			reg["auto_connect"] = !b
		}
	}
	if v.Count() > 0 || e.Name == "" {
		return fail()
	}
	body, err := json.Marshal(reg)
	if err != nil { // a RawMessage that is not JSON: cannot happen, ObjectMembers decoded it
		v.Add(strictjson.FieldJSONInvalid, "JSON decode error", base)
		return fail()
	}
	req, ferrs := Registration(body, checks)
	for _, fe := range ferrs {
		fe.Loc = importLoc(base, fe.Loc, urlKey)
		e.Errors = append(e.Errors, fe)
	}
	if len(e.Errors) == 0 {
		e.Request = req
	}
	return e
}

// importLoc maps a registration error's location (["body","connection_config","base_url"]) to the file's
// (["body","mcpServers","name","url"]).
func importLoc(base, loc []any, urlKey string) []any {
	rest := loc
	if len(rest) > 0 && rest[0] == "body" {
		rest = rest[1:]
	}
	if len(rest) > 0 {
		switch rest[0] {
		case "connection_config":
			rest = rest[1:]
			if len(rest) > 0 && (rest[0] == "url" || rest[0] == "base_url") {
				rest = append([]any{urlKey}, rest[1:]...)
			}
		case "name", "transport_type":
			rest = nil
		case "auto_connect":
			rest = []any{"disabled"}
		}
	}
	return strictjson.At(base, rest...)
}

// looksLikeSSE reports whether a URL given without a type is the legacy SSE transport's endpoint: its path ends
// in /sse (the convention of every SSE server); anything else is taken as streamable HTTP, the current transport.
func looksLikeSSE(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(strings.ToLower(u.Path), "/"), "/sse")
}

// NormalizeName maps a name from a client's file to the name rule (a lowercase letter, then lowercase letters,
// digits, '-' or '_'; at most MaxNameLength): lowercase, every other character becomes '-', runs of '-' collapse,
// leading and trailing '-' go, and a name that does not start with a letter gets the prefix "mcp-". It answers ""
// when no letter or digit is left. A name that already obeys the rule is returned unchanged.
func NormalizeName(s string) string {
	if nameRe.MatchString(s) && len(s) <= MaxNameLength {
		return s
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
			dash = false
		default:
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
		}
	}
	name := strings.Trim(b.String(), "-_")
	if name == "" {
		return ""
	}
	if name[0] < 'a' || name[0] > 'z' {
		name = "mcp-" + name
	}
	if len(name) > MaxNameLength {
		name = strings.TrimRight(name[:MaxNameLength], "-_")
	}
	return name
}
