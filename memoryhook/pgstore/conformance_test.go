package pgstore

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memoryhook.Store {
		db := newTestDB(t)
		s := db.open(t)
		t.Cleanup(func() { db.checkUsage(t) })
		return s
	})
}

func TestContinuationsConformance(t *testing.T) {
	storetest.RunContinuations(t, func(t *testing.T) memoryhook.Continuations { return newTestDB(t).open(t) })
}

func TestHistoryConformance(t *testing.T) {
	storetest.RunHistory(t, func(t *testing.T) memoryhook.Governed {
		db := newTestDB(t)
		s := db.open(t)
		t.Cleanup(func() { db.checkUsage(t) })
		return s
	})
}
