package tokens

import (
	"context"
	"errors"
)

// OpenPGLedger opens the PostgreSQL ledger (not implemented yet).
func OpenPGLedger(ctx context.Context, url string) (Ledger, error) {
	return nil, errors.New("postgres ledger: not implemented yet")
}
