package sqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// Open creates the embedded store's file (and its directory) and applies the migrations; a server registered in
// it reads back by id and by name, with the defaults the store fills in, and a second registration of the name is
// refused.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "store-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := sqlite.Open(ctx, filepath.Join(dir, "aggregator.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	srv := persistence.Server{
		Name:             "github",
		TransportType:    persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"npx","args":["-y","@modelcontextprotocol/server-github"]}`),
	}
	if err := store.CreateServer(ctx, &srv, 0); err != nil { // 0: no limit on the number of servers
		log.Fatal(err)
	}

	got, err := store.GetServer(ctx, srv.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Name, got.TransportType, got.Status, string(got.ConnectionConfig))
	byName, _ := store.GetServerByName(ctx, "github")
	fmt.Println("same id by name:", byName.ID == srv.ID)

	again := persistence.Server{Name: "github", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"other"}`)}
	err = store.CreateServer(ctx, &again, 0)
	fmt.Println("name taken:", errors.Is(err, persistence.ErrAlreadyExists))
	// Output:
	// github STDIO DISCONNECTED {"command":"npx","args":["-y","@modelcontextprotocol/server-github"]}
	// same id by name: true
	// name taken: true
}
