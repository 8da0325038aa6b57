//go:build !race

package binaries

// Race is whether this build has the race detector, so binaries built for a
// test under -race get it too.
const Race = false
