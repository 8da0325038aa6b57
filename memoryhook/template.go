package memoryhook

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Seed copies the template folder dir into store on the store's first
// use: when it has never held a memory (no version at all, deleted ones
// included), so a user who deletes the seeded files is not seeded again,
// nor after a restart. Files are written as the system actor, under lim;
// a file the store already has is left as it is. Only regular files are
// copied (links and special files in the template are skipped). It
// returns the files written; a store without history is never seeded.
func Seed(ctx context.Context, st Store, store string, lim Limits, dir string) (int, error) {
	g, ok := st.(Governed)
	if !ok {
		return 0, nil
	}
	vs, err := g.Versions(ctx, store, VersionQuery{Limit: 1})
	if err != nil || len(vs) > 0 {
		return 0, err
	}
	sc := Scope{Tenant: store, Limits: lim.OrDefaults(), Actor: Actor{Type: ActorSystem}}
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		p, perr := ParsePath(Root + "/" + filepath.ToSlash(rel))
		if perr != nil || hiddenRel(filepath.ToSlash(rel)) {
			return nil // a name no memory may have, or one the model would never see
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := sc.Limits.checkWrite(p, data); err != nil {
			return fmt.Errorf("template file %s: %w", rel, err)
		}
		switch err := g.Backend().Create(ctx, sc, p, data); {
		case errors.Is(err, ErrExist):
		case err != nil:
			return fmt.Errorf("template file %s: %w", rel, err)
		default:
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("seed memory store %s: %w", store, err)
	}
	return n, nil
}
