package policy

import "golang.org/x/sys/cpu"

var (
	// vectorSkim says whether skimBlocks runs vector code, so skimValue works by blocks.
	vectorSkim = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasBMI1
	// skim512 picks the AVX-512 block walk over the AVX2 one. It needs AVX-512BW for byte
	// compares into mask registers; VBMI2 stands for "Ice Lake, Zen 4 or later", so the first
	// AVX-512 Xeons, which lower the core's clock while 512-bit instructions run, keep AVX2.
	skim512 = vectorSkim && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VBMI2
)

// skimBlocks is skimBlocksGeneric, in vector code where the CPU has it.
func skimBlocks(src []byte, st *blockState, strMask uint64) (k int, events uint64) {
	switch {
	case !vectorSkim:
		return skimBlocksGeneric(src, st, strMask)
	case len(src) < 64:
		return 0, 0
	case skim512:
		return skimBlocksAVX512(&src[0], len(src)/64, st, strMask)
	}
	return skimBlocksAVX2(&src[0], len(src)/64, st, strMask)
}

// skimBlocksAVX2 is skimBlocksGeneric on n blocks from src (skim_amd64.s).
//
//go:noescape
func skimBlocksAVX2(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)

// skimBlocksAVX512 is skimBlocksAVX2 with AVX-512BW (skim_amd64.s).
//
//go:noescape
func skimBlocksAVX512(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)
