package policy

import "golang.org/x/sys/cpu"

// vectorSkim says whether skimBlocks runs vector code, so skimValue works by blocks.
var vectorSkim = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ

// skimBlocks is skimBlocksGeneric, in vector code where the CPU has it.
func skimBlocks(src []byte, st *blockState, strMask uint64) (k int, events uint64) {
	if !vectorSkim {
		return skimBlocksGeneric(src, st, strMask)
	}
	if len(src) < 64 {
		return 0, 0
	}
	return skimBlocksAVX2(&src[0], len(src)/64, st, strMask)
}

// skimBlocksAVX2 is skimBlocksGeneric on n blocks from src (skim_amd64.s).
//
//go:noescape
func skimBlocksAVX2(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)
