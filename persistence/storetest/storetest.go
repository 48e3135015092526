// Package storetest is the one conformance suite every persistence.Store implementation must pass, so the
// PostgreSQL and SQLite stores behave the same and callers can switch between them without noticing. Each
// implementation's tests call Run with a function that opens a fresh, empty store.
package storetest

import (
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// Run runs the whole suite. open must return a new, empty store for the given (sub)test and arrange for it to be
// closed when that test ends; Run calls it once per subtest.
func Run(t *testing.T, open func(t *testing.T) persistence.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s persistence.Store)
	}{
		{"PingAndKind", testPingAndKind},
		{"CreateAndGetServer", testCreateAndGetServer},
		{"CreateServerInvalid", testCreateServerInvalid},
		{"DuplicateServer", testDuplicateServer},
		{"ConcurrentCreateSameName", testConcurrentCreateSameName},
		{"NotFound", testNotFound},
		{"ListServers", testListServers},
		{"UpdateServer", testUpdateServer},
		{"RenameServerRenamesTools", testRenameServerRenamesTools},
		{"SetAutoConnect", testSetAutoConnect},
		{"RecordTransition", testRecordTransition},
		{"RecordHealth", testRecordHealth},
		{"DeleteServerCascades", testDeleteServerCascades},
		{"CountServersByStatus", testCountServersByStatus},
		{"ReplaceServerTools", testReplaceServerTools},
		{"ReplaceServerToolsInvalid", testReplaceServerToolsInvalid},
		{"DefinitionHashIsPortable", testDefinitionHashIsPortable},
		{"ReplaceManyTools", testReplaceManyTools},
		{"ListTools", testListTools},
		{"SetToolClassificationAndCountTools", testSetToolClassificationAndCountTools},
		{"Audit", testAudit},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentUse", testConcurrentUse},
		{"LeaseOwnership", testLeaseOwnership},
		{"ReleaseOwnerLeases", testReleaseOwnerLeases},
		{"LapsedLeaseRenewedByItsOwner", testLapsedLeaseRenewed},
		{"FencedWrites", testFencedWrites},
		{"ConcurrentAcquire", testConcurrentAcquire},
		{"Nodes", testNodes},
		{"TakeOverLease", testTakeOverLease},
		{"ServerLimit", testServerLimit},
		{"ReplaceServerFeatures", testReplaceServerFeatures},
		{"FencedFeatures", testFencedFeatures},
		{"IdempotentCreate", testIdempotentCreate},
		{"IdempotencyKeyExpiry", testIdempotencyKeyExpiry},
		{"ConcurrentIdempotentCreate", testConcurrentIdempotentCreate},
		{"ToolPolicy", testToolPolicy},
		{"ToolPins", testToolPins},
		{"ToolOverrides", testToolOverrides},
		{"Profiles", testProfiles},
		{"AccessPolicy", testAccessPolicy},
		{"CredentialMode", testCredentialMode},
		{"UserSecrets", testUserSecrets},
		{"CredentialSwitch", testCredentialSwitch},
		{"Tasks", testTasks},
		{"TaskLimit", testTaskLimit},
		{"TaskUpdates", testTaskUpdates},
		{"TaskOrphansAndExpiry", testTaskOrphansAndExpiry},
		{"OAuthFlows", testOAuthFlows},
		{"OAuthClients", testOAuthClients},
		{"TaskBackendClaim", testTaskBackendClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}
