package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgw/aggregator/http/auth/oauth"
)

// The metadata URL of a resource is the well-known path inserted before the resource's path (RFC 9728).
func ExampleMetadataURL() {
	fmt.Println(oauth.MetadataURL("https://mcp.example.com/mcp"))
	// Output: https://mcp.example.com/.well-known/oauth-protected-resource/mcp
}

// A Verifier discovers the issuer and its keys once, then checks each presented access token.
func ExampleVerifier_Verify() {
	// An issuer: OpenID discovery and a JWKS with one ES256 key.
	pk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	key := jose.JSONWebKey{Key: pk, KeyID: "k1", Algorithm: string(jose.ES256)}
	var issuer *httptest.Server
	issuer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuer.URL, "jwks_uri": issuer.URL + "/jwks"})
		case "/jwks":
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{key.Public()}})
		}
	}))
	defer issuer.Close()

	const resource = "https://mcp.example.com/mcp"
	v, err := oauth.New(context.Background(), oauth.Config{Issuer: issuer.URL, Audience: resource, Resource: resource})
	if err != nil {
		fmt.Println(err)
		return
	}
	signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, nil)
	token, _ := jwt.Signed(signer).Claims(map[string]any{"iss": issuer.URL, "aud": resource, "sub": "alice",
		"scope": "openid aggregator:client", "exp": time.Now().Add(5 * time.Minute).Unix()}).Serialize()

	c, err := v.Verify(context.Background(), token)
	fmt.Println(c.Subject, c.HasScope(v.ClientScope()), c.HasScope(v.AdminScope()), err)
	_, err = v.Verify(context.Background(), token+"x")
	fmt.Println(err != nil)
	// Output:
	// alice true false <nil>
	// true
}
