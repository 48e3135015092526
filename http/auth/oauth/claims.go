package oauth

import (
	"encoding/json"
	"strings"
)

// extraClaims are the claims beyond RFC 7519's that name the caller and its scopes. Providers differ: scope is a
// space-separated string (RFC 9068, Keycloak, Okta's scp is a list, Entra's scp a string), the client is client_id
// (RFC 9068), azp (Keycloak, OpenID), appid (Entra v1) or cid (Okta). A claim of an unexpected JSON type is
// ignored, never an error that would reveal how far a token got.
type extraClaims struct {
	Scope             stringList  `json:"scope"`
	Scp               stringList  `json:"scp"`
	ClientID          looseString `json:"client_id"`
	Azp               looseString `json:"azp"`
	AppID             looseString `json:"appid"`
	Cid               looseString `json:"cid"`
	Email             looseString `json:"email"`
	Name              looseString `json:"name"`
	PreferredUsername looseString `json:"preferred_username"`
}

func (e extraClaims) clientID() string {
	for _, s := range []looseString{e.ClientID, e.Azp, e.AppID, e.Cid} {
		if s != "" {
			return string(s)
		}
	}
	return ""
}

// scopes are scope and scp together, without repeats.
func (e extraClaims) scopes() []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range []stringList{e.Scope, e.Scp} {
		for _, s := range list {
			if s != "" && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// looseString is a string claim; any other JSON type reads as "".
type looseString string

func (s *looseString) UnmarshalJSON(b []byte) error {
	var v string
	if json.Unmarshal(b, &v) == nil {
		*s = looseString(v)
	}
	return nil
}

// stringList is a claim that is a space-separated string or a list of strings; anything else reads as empty.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*l = strings.Fields(s)
		return nil
	}
	var list []any
	if json.Unmarshal(b, &list) == nil {
		var out []string
		for _, x := range list {
			if s, ok := x.(string); ok {
				out = append(out, strings.Fields(s)...)
			}
		}
		*l = out
	}
	return nil
}
