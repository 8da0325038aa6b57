// Package kubevolume writes a folder the way the kubelet writes a ConfigMap
// or Secret volume, so tests can show what a pod sees, updates included.
//
// The kubelet (pkg/volume/util/atomic_writer.go) keeps the files in a
// timestamped folder "..<timestamp>", points the symlink "..data" at it, and
// shows each file as a symlink "<name>" -> "..data/<name>". An update writes
// a new timestamped folder, points a new symlink "..data_tmp" at it, renames
// "..data_tmp" over "..data" (the one atomic step), adds symlinks for new
// names, removes those of names no longer present, and removes the old
// folder. Write does exactly that, in that order.
package kubevolume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

const dataLink = "..data"

var seq atomic.Int64

// Write makes dir show files (name -> content), as a first mount when dir
// has no "..data" yet, else as an update of the mounted volume.
func Write(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	oldTs, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// ..2026_12_03_18_40_00.123456789 plus a sequence, so two writes within
	// one clock tick still get two folders.
	ts := fmt.Sprintf("..%s_%d", time.Now().UTC().Format("2006_01_02_15_04_05.000000000"), seq.Add(1))
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name, content := range files {
		if strings.ContainsRune(name, '/') || strings.HasPrefix(name, "..") {
			return fmt.Errorf("kubevolume: invalid file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644); err != nil {
			return err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	tmp := filepath.Join(dir, dataLink+"_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	for _, name := range names {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return err
		}
	}
	if err := removeStale(dir, files); err != nil {
		return err
	}
	if oldTs != "" {
		return os.RemoveAll(filepath.Join(dir, oldTs))
	}
	return nil
}

// removeStale removes the user-visible symlinks of names not in files.
func removeStale(dir string, files map[string]string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || e.Type()&os.ModeSymlink == 0 {
			continue
		}
		if _, ok := files[e.Name()]; !ok {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
