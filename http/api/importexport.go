package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Outcomes of one entry of an import.
const (
	// ImportCreated: registered (or, in a dry run, would be).
	ImportCreated = "created"
	// ImportSkipped: a server of that name exists already; it is left as it is.
	ImportSkipped = "skipped"
	// ImportInvalid: the entry breaks a rule (its errors say which); nothing of it was registered.
	ImportInvalid = "invalid"
	// ImportFailed: the entry is valid but the daemon refused it (server limit, timeout, shutting down).
	ImportFailed = "failed"
)

// ImportResult is the outcome of one entry of POST /import.
type ImportResult struct {
	// SourceName is the entry's name in the file, Name the server's (NormalizeName); Renamed when they differ.
	SourceName    string                  `json:"source_name"`
	Name          string                  `json:"name"`
	Renamed       bool                    `json:"renamed"`
	Status        string                  `json:"status"`
	TransportType string                  `json:"transport_type,omitempty"`
	ServerID      string                  `json:"server_id,omitempty"`
	Reason        string                  `json:"reason,omitempty"`
	Errors        []strictjson.FieldError `json:"errors,omitempty"`
	Ignored       []string                `json:"ignored_fields,omitempty"`
}

// ImportReport answers POST /import.
type ImportReport struct {
	Format  string         `json:"format"`
	DryRun  bool           `json:"dry_run"`
	Results []ImportResult `json:"results"`
	// Counts holds how many entries had each status (every status is present).
	Counts map[string]int `json:"counts"`
	// Renamed maps each name from the file that had to change to the name it was given.
	Renamed map[string]string `json:"renamed"`
}

// POST /import?dry_run=: register every server of an mcpServers file (Claude Desktop, Cursor) or a VS Code
// servers file. The file as a whole must parse (else 422); each entry then stands alone: created, skipped when its
// name exists, invalid with its errors, or failed when the daemon refuses it. An entry is registered whole or not
// at all (Control.Register persists it in one step), and each registration is audited like POST /servers.
func (s *server) importServers(c *fiber.Ctx) error {
	v := strictjson.New("body")
	dryRun := queryBool(c, v, "dry_run")
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	file, ferrs := validate.Import(body, validate.Outbound(s.control))
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	dryRun = dryRun || file.DryRun

	out := ImportReport{Format: file.Format, DryRun: dryRun, Results: make([]ImportResult, 0, len(file.Entries)),
		Counts:  map[string]int{ImportCreated: 0, ImportSkipped: 0, ImportInvalid: 0, ImportFailed: 0},
		Renamed: map[string]string{}}
	for _, e := range file.Entries {
		r := ImportResult{SourceName: e.SourceName, Name: e.Name, Renamed: e.Name != e.SourceName,
			TransportType: e.TransportType, Ignored: e.Ignored}
		if r.Renamed && e.Name != "" {
			out.Renamed[e.SourceName] = e.Name
		}
		switch {
		case len(e.Errors) > 0:
			r.Status, r.Errors, r.Reason = ImportInvalid, e.Errors, e.Reason()
		default:
			r.Status, r.ServerID, r.Reason = s.importOne(c, e, dryRun)
		}
		out.Counts[r.Status]++
		out.Results = append(out.Results, r)
	}
	return c.JSON(out)
}

// importOne registers one valid entry (or, in a dry run, checks that its name is free) and answers its status.
func (s *server) importOne(c *fiber.Ctx, e validate.ImportEntry, dryRun bool) (status, id, reason string) {
	ctx, cancel := s.opContext(c)
	defer cancel()
	if existing, err := s.store.GetServerByName(ctx, e.Name); err == nil {
		return ImportSkipped, existing.ID, "Server already exists: " + e.Name
	} else if !errors.Is(err, persistence.ErrNotFound) {
		return ImportFailed, "", failure(fmt.Errorf("look up server %q: %w", e.Name, err))
	}
	if dryRun {
		return ImportCreated, "", ""
	}
	req := e.Request
	req.Actor = actorOf(c)
	req.IP = c.IP()
	srv, _, err := s.gw.Register(ctx, req, nil)
	switch {
	case errors.Is(err, persistence.ErrAlreadyExists):
		return ImportSkipped, "", "Server already exists: " + e.Name
	case err != nil:
		s.log.WarnContext(ctx, "import: register failed", "server", e.Name, "error", err)
		return ImportFailed, "", failure(err)
	}
	s.audit(c, audit.ServerRegistered, srv.ID, srv.Name, map[string]any{"transport_type": srv.TransportType,
		"auto_connect": req.AutoConnect, "imported_from": e.SourceName})
	return ImportCreated, srv.ID, ""
}

// failure is the detail a client may see of an error (the shared error mapping's, else a generic sentence).
func failure(err error) string {
	if ae := apierror.FromError(err, apierror.Subject{}); ae != nil {
		if d, ok := ae.Detail.(string); ok {
			return d
		}
		return ae.Code
	}
	return "Internal error"
}

// ExportFile answers GET /export: the servers in a client's file format (one of the two keys is set).
type ExportFile struct {
	MCPServers map[string]ExportEntry `json:"mcpServers,omitempty"`
	Servers    map[string]ExportEntry `json:"servers,omitempty"`
}

// ExportEntry is one server of an export, in the fields desktop clients read.
type ExportEntry struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// CredentialMode and UserCredential: a per_user server's (issue 28; absent for a shared one, the default), so
	// that an export imports back as what it was. Desktop clients ignore them. Never a caller's secret.
	CredentialMode string                          `json:"credential_mode,omitempty"`
	UserCredential *persistence.UserCredentialSlot `json:"user_credential,omitempty"`
}

// GET /export?format=mcpServers|vscode: every registered server as a client's file. Secrets are masked exactly as
// GET /servers/{id} masks them (connconfig.Mask): a value written as a ${VAR} reference is exported as written,
// any other secret as "***", so an export never carries a credential in clear.
func (s *server) exportServers(c *fiber.Ctx) error {
	format := "mcpServers"
	if c.Context().QueryArgs().Has("format") {
		format = c.Query("format")
		switch strings.ToLower(format) {
		case "mcpservers", "claude", "cursor":
			format = "mcpServers"
		case "vscode", "servers":
			format = "servers"
		default:
			return apierror.Validation([]strictjson.FieldError{{Loc: []any{"query", "format"}, Type: strictjson.FieldValueError,
				Msg: "Input should be one of mcpServers, vscode"}})
		}
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	servers, _, err := s.store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return mapError(fmt.Errorf("list servers: %w", err), subject{})
	}
	entries := make(map[string]ExportEntry, len(servers))
	for _, srv := range servers {
		entries[srv.Name] = exportEntry(srv, format == "servers")
	}
	if format == "servers" {
		return c.JSON(ExportFile{Servers: entries})
	}
	return c.JSON(ExportFile{MCPServers: entries})
}

// exportEntry renders one server; vscode adds "type" to stdio servers too (VS Code requires it).
func exportEntry(srv persistence.Server, vscode bool) ExportEntry {
	e := exportConnection(srv, vscode)
	if srv.CredentialMode == persistence.CredentialPerUser && srv.UserCredential != nil {
		slot := *srv.UserCredential
		e.CredentialMode, e.UserCredential = srv.CredentialMode, &slot
	}
	return e
}

// exportConnection renders one server's connection.
func exportConnection(srv persistence.Server, vscode bool) ExportEntry {
	var cfg connconfig.Config
	_ = json.Unmarshal(connconfig.Mask(srv.ConnectionConfig), &cfg) // a config Mask cannot read exports empty
	switch srv.TransportType {
	case persistence.TransportSTDIO:
		e := ExportEntry{Command: cfg.Command, Args: cfg.Args, Env: cfg.Env, Cwd: cfg.Cwd}
		if vscode {
			e.Type = "stdio"
		}
		return e
	case persistence.TransportSSE:
		return ExportEntry{Type: "sse", URL: cfg.URL, Headers: cfg.Headers}
	default:
		return ExportEntry{Type: "http", URL: cfg.BaseURL, Headers: cfg.Headers}
	}
}
