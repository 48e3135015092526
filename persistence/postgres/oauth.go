package postgres

import (
	"strconv"

	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
)

// oauthLockClass is the first key of the advisory lock that serialises the creation of one subject's OAuth flows
// (the second is the subject's hash), so that two nodes cannot both pass the per-subject bound.
const oauthLockClass int32 = 0x6f617574 // "oaut"

// The callers' OAuth flows and the registered clients (persistence/internal/sqlstore/oauth.go) in PostgreSQL's SQL.
func oauthQueries() sqlstore.OAuthQueries {
	return sqlstore.OAuthQueries{
		LockSubject:        `SELECT pg_advisory_xact_lock(` + strconv.Itoa(int(oauthLockClass)) + `, hashtext($1))`,
		DeleteExpiredFlows: `DELETE FROM mcp.oauth_flows WHERE expires_at <= $1`,
		CountFlows:         `SELECT count(*) FROM mcp.oauth_flows WHERE expires_at > $1`,
		CountSubjectFlows:  `SELECT count(*) FROM mcp.oauth_flows WHERE subject = $1 AND expires_at > $2`,
		InsertFlow: `INSERT INTO mcp.oauth_flows (state, server_id, subject, data, created_at, expires_at)
			VALUES ($1, $2, $3, $4::jsonb, $5, $6)`,
		ReturnFlow: `UPDATE mcp.oauth_flows SET returned = true, code = $2::jsonb, iss = $3, error = $4
			WHERE state = $1 AND NOT returned AND expires_at > $5`,
		TakeFlow: `DELETE FROM mcp.oauth_flows WHERE state = $1 AND subject = $2 AND returned AND expires_at > $3
			RETURNING state, server_id::text, subject, data::text, created_at, expires_at, code::text, iss, error`,
		FlowPending: `SELECT EXISTS (SELECT 1 FROM mcp.oauth_flows WHERE state = $1 AND subject = $2 AND expires_at > $3)`,

		GetClient: `SELECT server_id::text, issuer, redirect_url, data::text, created_at FROM mcp.oauth_clients
			WHERE server_id = $1 AND issuer = $2`,
		UpsertClient: `INSERT INTO mcp.oauth_clients (server_id, issuer, redirect_url, data, created_at)
			VALUES ($1, $2, $3, $4::jsonb, $5)
			ON CONFLICT (server_id, issuer) DO UPDATE SET redirect_url = EXCLUDED.redirect_url, data = EXCLUDED.data,
				created_at = EXCLUDED.created_at`,
		DeleteClient: `DELETE FROM mcp.oauth_clients WHERE server_id = $1 AND issuer = $2`,

		ListFlows: `SELECT state, server_id::text, subject, data::text, created_at, expires_at, returned, code::text, iss, error
			FROM mcp.oauth_flows WHERE expires_at > $1 ORDER BY created_at, state`,
		ResealFlow: `UPDATE mcp.oauth_flows SET data = coalesce($2::jsonb, data), code = coalesce($3::jsonb, code)
			WHERE state = $1 AND expires_at > $4`,
		ListClients: `SELECT server_id::text, issuer, redirect_url, data::text, created_at FROM mcp.oauth_clients
			ORDER BY server_id, issuer`,
		ResealClient: `UPDATE mcp.oauth_clients SET data = $3::jsonb WHERE server_id = $1 AND issuer = $2`,
	}
}
