package routing_test

import (
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// A route table is built from the servers and their stored tools, then asked where a call goes: by namespaced
// name, by an original name only one server has, by the client-safe alias the MCP endpoint lists, or with an
// explicit server. An original name two servers share is ambiguous and names them.
func ExampleRouteTable_Resolve() {
	servers := []routing.ServerEntry{
		{ID: "id-github", Name: "github", Status: persistence.StatusConnected},
		{ID: "id-gitlab", Name: "gitlab", Status: persistence.StatusConnected},
	}
	tool := func(serverID, server, name string) persistence.Tool {
		return persistence.Tool{Name: server + "." + name, OriginalName: name, SourceServerID: serverID}
	}
	rt := routing.NewRouteTable(servers, []persistence.Tool{
		tool("id-github", "github", "create_issue"),
		tool("id-github", "github", "search"),
		tool("id-gitlab", "gitlab", "search"),
	}, "__")

	for _, name := range []string{"github.search", "create_issue", "gitlab__search"} {
		r, err := rt.Resolve(name, "")
		if err != nil {
			fmt.Println(name, "->", err)
			continue
		}
		fmt.Printf("%s -> %s on %s (%s)\n", name, r.Tool, r.ServerName, r.Strategy)
	}
	r, _ := rt.Resolve("search", "id-gitlab")
	fmt.Printf("search with server id-gitlab -> %s on %s (%s)\n", r.Tool, r.ServerName, r.Strategy)

	_, err := rt.Resolve("search", "")
	var amb *routing.AmbiguousToolError
	fmt.Println("search ->", errors.As(err, &amb), amb.ServerIDs)
	_, err = rt.Resolve("github.nope", "")
	fmt.Println("github.nope ->", errors.Is(err, routing.ErrToolNotFound))
	// Output:
	// github.search -> search on github (namespace_resolved)
	// create_issue -> create_issue on github (lookup_resolved)
	// gitlab__search -> search on gitlab (alias)
	// search with server id-gitlab -> search on gitlab (explicit_server)
	// search -> true [id-github id-gitlab]
	// github.nope -> true
}

// Alias is the name a tool is listed under on the MCP endpoint: client-safe characters only, at most 64 of them.
func ExampleAlias() {
	fmt.Println(routing.Alias("github", "create_issue", "__"))
	fmt.Println(routing.Alias("my server", "api.v2/create", "__"))
	// Output:
	// github__create_issue
	// my_server__api_v2_create
}
