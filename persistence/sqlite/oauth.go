package sqlite

import "github.com/mcpgw/aggregator/persistence/internal/sqlstore"

// The callers' OAuth flows and the registered clients (persistence/internal/sqlstore/oauth.go) in SQLite's SQL.
// Writes are serial (the single write connection holds the write lock from BEGIN): counting needs no lock.

func oauthQueries() sqlstore.OAuthQueries {
	return sqlstore.OAuthQueries{
		DeleteExpiredFlows: `DELETE FROM oauth_flows WHERE expires_at <= ?`,
		CountFlows:         `SELECT count(*) FROM oauth_flows WHERE expires_at > ?`,
		CountSubjectFlows:  `SELECT count(*) FROM oauth_flows WHERE subject = ? AND expires_at > ?`,
		InsertFlow: `INSERT INTO oauth_flows (state, server_id, subject, data, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)`,
		ReturnFlow: `UPDATE oauth_flows SET returned = 1, code = ?2, iss = ?3, error = ?4
			WHERE state = ?1 AND returned = 0 AND expires_at > ?5`,
		TakeFlow: `DELETE FROM oauth_flows WHERE state = ?1 AND subject = ?2 AND returned = 1 AND expires_at > ?3
			RETURNING state, server_id, subject, data, created_at, expires_at, code, iss, error`,
		FlowPending: `SELECT EXISTS (SELECT 1 FROM oauth_flows WHERE state = ?1 AND subject = ?2 AND expires_at > ?3)`,

		GetClient: `SELECT server_id, issuer, redirect_url, data, created_at FROM oauth_clients
			WHERE server_id = ? AND issuer = ?`,
		UpsertClient: `INSERT INTO oauth_clients (server_id, issuer, redirect_url, data, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
			ON CONFLICT (server_id, issuer) DO UPDATE SET redirect_url = excluded.redirect_url, data = excluded.data,
				created_at = excluded.created_at`,
		DeleteClient: `DELETE FROM oauth_clients WHERE server_id = ? AND issuer = ?`,

		ListFlows: `SELECT state, server_id, subject, data, created_at, expires_at, returned = 1, code, iss, error
			FROM oauth_flows WHERE expires_at > ? ORDER BY created_at, state`,
		ResealFlow: `UPDATE oauth_flows SET data = coalesce(?2, data), code = coalesce(?3, code)
			WHERE state = ?1 AND expires_at > ?4`,
		ListClients:  `SELECT server_id, issuer, redirect_url, data, created_at FROM oauth_clients ORDER BY server_id, issuer`,
		ResealClient: `UPDATE oauth_clients SET data = ?3 WHERE server_id = ?1 AND issuer = ?2`,
	}
}
