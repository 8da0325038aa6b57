//go:build !amd64

package policy

// vectorSkim is false: without vector code, skimValue stops at each quote (skimValueBytes),
// which is faster than classifying bytes one at a time.
const vectorSkim = false

func skimBlocks(src []byte, st *blockState, strMask uint64) (k int, events uint64) {
	return skimBlocksGeneric(src, st, strMask)
}
