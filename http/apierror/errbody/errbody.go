// Package errbody is the error body of every answer, {"detail","error_code"[,"context"][,"server"]}, and its one
// writer on net/http. Package apierror builds its answers on it; package auth, which apierror imports (and which
// must not pull the actor system that apierror maps), answers its 401, 403 and host-guard refusals with it too. It
// imports only the standard library.
package errbody

import (
	"encoding/json"
	"net/http"
)

// ServerRef names a server and its state in an error (SERVER_UNAVAILABLE) or a search result.
type ServerRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Body is the one shape of every error answer: Detail is a message, or for 422 the list of field errors; Context
// carries extra machine-readable facts and is omitted when empty; Server is set on SERVER_UNAVAILABLE.
type Body struct {
	Detail    any            `json:"detail"`
	ErrorCode string         `json:"error_code"`
	Context   map[string]any `json:"context,omitempty"`
	Server    *ServerRef     `json:"server,omitempty"`
}

// Write answers b with status on a net/http response, as JSON, with a Retry-After header when retryAfter is not
// "". Headers the caller set before (WWW-Authenticate) are kept.
func Write(w http.ResponseWriter, status int, b Body, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}
