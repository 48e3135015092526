package mcpserver

import (
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
)

// TestMetaToolNamesMatchTheRoutingTable: the routing table reserves exactly the meta-tools' names for aliases, so
// no backend tool's alias can replace a meta-tool whatever the separator.
func TestMetaToolNamesMatchTheRoutingTable(t *testing.T) {
	for _, name := range []string{toolAdd, toolRemove, toolList, toolConnect, toolDisconnect, toolStatus, toolSearch, toolExecute, toolCurate} {
		if !routing.IsMetaToolName(name) {
			t.Errorf("meta-tool %s is not reserved by routing.IsMetaToolName", name)
		}
	}
}
