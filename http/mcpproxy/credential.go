package mcpproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
)

// Per-user credentials on the per-server endpoint (issue 28): a session to a per_user server is opened with the
// caller's own stored credential injected (ProxyOptions.Subject), so it can only start once the caller has one.
// A caller without one is answered at initialize, before any session exists:
//   - a client that supports URL-mode elicitation (2025-11-25), when the console's address is known, gets the
//     initialize's JSON-RPC error URLElicitationRequired (-32042) whose one elicitation points to the console's
//     page for the server, as /mcp's in-band question does (http/mcpserver/credential_ask.go); the client opens it,
//     the user stores the credential, and the client initializes again;
//   - any other client gets 403 CREDENTIAL_REQUIRED in the error shape, with where to store the credential, as REST
//     and /mcp answer a call without one.
//
// Unless the server takes OAuth with token exchange and the caller came with an OAuth token of the organisation's
// issuer: then the token is exchanged for the caller's grant and the session opens (Handler.exchanged), and while it
// runs, its upstream session exchanges the token of the client's latest request again whenever the exchanged one
// expires (session.renew), so the client's session never has to start over for it.

// credentialRequired answers an initialize whose caller has no credential of their own for the per_user server srv;
// err is the actors' ErrCredentialRequired, whose text says where to store one.
func (h *Handler) credentialRequired(w http.ResponseWriter, srv routing.ServerEntry, init initRequest, err error) {
	detail, oauth := strings.TrimSuffix(err.Error(), ": "+actors.ErrCredentialRequired.Error()), false
	if ce, ok := errors.AsType[*actors.CredentialRequiredError](err); ok {
		detail, oauth = ce.Message, ce.OAuth
	}
	e := apierror.CredentialRequired(srv.ID, srv.Name, detail, oauth)
	if h.opts.ConsoleURL == "" || !canOpenURL(init.Capabilities) || len(init.ID) == 0 {
		apierror.Write(w, e)
		return
	}
	rpcErr := urlElicitationError(h.opts.ConsoleURL, srv, e, "Server "+srv.Name+" works with your own credential. Open the page to store it, then connect again.")
	raw := rpcErr.Data
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": init.ID,
		"error": map[string]any{"code": rpcErr.Code, "message": rpcErr.Message, "data": json.RawMessage(raw)}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// urlElicitationError is the JSON-RPC error URLElicitationRequired (-32042) whose one elicitation points to the
// console's page for srv, its data keeping the shared error body's code, detail and context (e) beside the
// elicitations the revision defines, for a client that reads those.
func urlElicitationError(consoleURL string, srv routing.ServerEntry, e *apierror.Error, message string) *jsonrpc.Error {
	elicitation := uuid.NewString()
	rpcErr, _ := mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", ElicitationID: elicitation,
		URL: gateway.CredentialPageURL(consoleURL, srv.ID, elicitation), Message: message}}).(*jsonrpc.Error)
	data := map[string]any{}
	_ = json.Unmarshal(rpcErr.Data, &data)
	data["error_code"] = e.Code
	data["detail"] = e.Detail
	data["context"] = e.Context
	raw, _ := json.Marshal(data)
	return &jsonrpc.Error{Code: rpcErr.Code, Message: rpcErr.Message, Data: raw}
}

// codeCredentialRequired is the JSON-RPC error code of a request other than a tool call, on a session whose
// caller's grant stopped working, from a client that cannot be sent to the console's page (an
// implementation-defined server error; its data is the shared error body).
const codeCredentialRequired = -32043

// credentialLost answers a request of a session whose caller's OAuth grant stopped giving tokens the backend takes
// and could not be renewed (the caller's token could not be exchanged again, the refresh was refused): the request
// was not run. A client that supports URL-mode elicitation is sent to the console's page for the server, as at
// initialize; a tool call of another client gets the tool error /mcp gives (CREDENTIAL_REQUIRED, where to
// authorize); another request, that body as a JSON-RPC error's data. The failure does not end the session.
func (s *session) credentialLost(req mcp.Request, ce *actors.CredentialRequiredError) (mcp.Result, error) {
	e := apierror.CredentialRequired(s.srv.ID, s.srv.Name, ce.Message, ce.OAuth)
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && s.h.opts.ConsoleURL != "" && ss.InitializeParams() != nil &&
		canOpenURL(ss.InitializeParams().Capabilities) {
		return nil, urlElicitationError(s.h.opts.ConsoleURL, s.srv, e,
			"Server "+s.srv.Name+" works with your own authorization of its backend, which expired. Open the page to authorize it again, then retry.")
	}
	if _, ok := req.(*mcp.CallToolRequest); ok {
		return e.CallToolResult(), nil
	}
	data, _ := json.Marshal(e.ToolResult())
	return nil, &jsonrpc.Error{Code: codeCredentialRequired, Message: e.Message(), Data: data}
}

// canOpenURL reports whether the client declared URL-mode elicitation.
func canOpenURL(c *mcp.ClientCapabilities) bool {
	return c != nil && c.Elicitation != nil && c.Elicitation.URL != nil
}
