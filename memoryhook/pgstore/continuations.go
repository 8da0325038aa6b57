package pgstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Continuations live in ctxproxy_memory_continuations, keyed by tenant and
// the sha256 of the reply id. Expiry is by the database's clock, so
// replicas with skewed clocks agree; an expired row is deleted when read,
// and about one put in 64 sweeps the tenant's expired rows.

func continuationKey(tenant, replyID string) ([]byte, error) {
	if !memoryhook.ValidTenant(tenant) {
		return nil, fmt.Errorf("continuation: invalid tenant %q", tenant)
	}
	sum := sha256.Sum256([]byte(replyID))
	return sum[:], nil
}

// PutContinuation implements memoryhook.Continuations.
func (s *Store) PutContinuation(ctx context.Context, tenant, replyID string, data []byte, ttl time.Duration) error {
	key, err := continuationKey(tenant, replyID)
	if err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	sweep := s.sweepEvery > 0 && rand.IntN(s.sweepEvery) == 0
	err = s.b.run(ctx, memoryhook.Scope{Tenant: tenant}, func(ctx context.Context) error {
		if sweep {
			if err := s.sweepContinuations(ctx, tenant); err != nil {
				return err
			}
		}
		_, err := s.pool.Exec(ctx, `INSERT INTO ctxproxy_memory_continuations (tenant, reply_hash, data, expires_at)
			VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
			ON CONFLICT (tenant, reply_hash) DO UPDATE SET data = EXCLUDED.data, expires_at = EXCLUDED.expires_at`,
			tenant, key, data, ttl.Microseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("continuation: %w", err)
	}
	return nil
}

// GetContinuation implements memoryhook.Continuations.
func (s *Store) GetContinuation(ctx context.Context, tenant, replyID string) ([]byte, error) {
	key, err := continuationKey(tenant, replyID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	var data []byte
	err = s.b.run(ctx, memoryhook.Scope{Tenant: tenant}, func(ctx context.Context) error {
		var live bool
		err := s.pool.QueryRow(ctx, `SELECT data, expires_at > now() FROM ctxproxy_memory_continuations
			WHERE tenant = $1 AND reply_hash = $2`, tenant, key).Scan(&data, &live)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			data = nil
			return nil
		case err != nil:
			return err
		case !live:
			data = nil
			_, err := s.pool.Exec(ctx, `DELETE FROM ctxproxy_memory_continuations
				WHERE tenant = $1 AND reply_hash = $2 AND expires_at <= now()`, tenant, key)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("continuation: %w", err)
	}
	return data, nil
}

// GetContinuations implements memoryhook.Continuations: one statement reads them all (and one
// deletes those that expired).
func (s *Store) GetContinuations(ctx context.Context, tenant string, replyIDs []string) ([][]byte, error) {
	out := make([][]byte, len(replyIDs))
	if len(replyIDs) == 0 {
		return out, nil
	}
	keys := make([][]byte, len(replyIDs))
	at := make(map[[sha256.Size]byte][]int, len(replyIDs))
	for i, id := range replyIDs {
		k, err := continuationKey(tenant, id)
		if err != nil {
			return nil, err
		}
		keys[i] = k
		at[[sha256.Size]byte(k)] = append(at[[sha256.Size]byte(k)], i)
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	err := s.b.run(ctx, memoryhook.Scope{Tenant: tenant}, func(ctx context.Context) error {
		clear(out)
		rows, err := s.pool.Query(ctx, `SELECT reply_hash, data, expires_at > now() FROM ctxproxy_memory_continuations
			WHERE tenant = $1 AND reply_hash = ANY($2)`, tenant, keys)
		if err != nil {
			return err
		}
		expired := false
		for rows.Next() {
			var hash, data []byte
			var live bool
			if err := rows.Scan(&hash, &data, &live); err != nil {
				rows.Close()
				return err
			}
			if !live {
				expired = true
				continue
			}
			if len(hash) == sha256.Size {
				for _, i := range at[[sha256.Size]byte(hash)] {
					out[i] = data
				}
			}
		}
		if err := rows.Err(); err != nil || !expired {
			return err
		}
		_, err = s.pool.Exec(ctx, `DELETE FROM ctxproxy_memory_continuations
			WHERE tenant = $1 AND reply_hash = ANY($2) AND expires_at <= now()`, tenant, keys)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("continuation: %w", err)
	}
	return out, nil
}

// sweepContinuations deletes the tenant's expired continuations, so
// abandoned threads do not pile up.
func (s *Store) sweepContinuations(ctx context.Context, tenant string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM ctxproxy_memory_continuations WHERE tenant = $1 AND expires_at <= now()`, tenant)
	return err
}
