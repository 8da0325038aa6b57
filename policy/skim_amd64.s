#include "textflag.h"

// The block walks of skimBlocksGeneric (skim.go) in vector code: skimBlocksAVX2 and
// skimBlocksAVX512. They differ only in how a 64-byte block's bytes become its three masks
// (AX: quotes, BX: backslashes, R12: brackets); what follows, escapedBy (integer arithmetic,
// skipped when the block has no backslash and starts unescaped) and prefixXOR (a carry-less
// multiply by all ones), is SKIM_STEP, written once.
//
// Every X/Y-register instruction here is VEX-encoded (VMOVQ, VPCLMULQDQ, not MOVQ, PCLMULQDQ): a
// legacy SSE instruction while the YMM registers' upper halves are dirty costs Intel cores a state
// transition each time, and with one per block the 1 MiB skim ran 2.5 ms instead of 90 µs on a
// Xeon with AVX-512 where the AMD machine of the first measurement never showed it.

// SKIM_AHEAD is how far ahead of the block each step asks for a cache line. A body the kernel has
// just copied in has mostly left the core's caches by the time it is skimmed (the load generator
// and the upstream run on the same cores), and the hardware's prefetchers stop at each 4 KiB page:
// without this the walk waited on memory, at 180 µs per MiB instead of 75 µs on a Xeon
// (BenchmarkSkimCold1MB); from 2 KiB ahead on it makes no difference.
#define SKIM_AHEAD 4096

// SKIM_ENTER loads the arguments: SI the block, CX blocks left, R8 the escape carry, R9 inStr,
// R10 strMask, R11 the even bits, X11 all ones (the multiplier of prefixXOR).
#define SKIM_ENTER \
	MOVQ src+0(FP), SI; \
	MOVQ n+8(FP), CX; \
	MOVQ st+16(FP), DI; \
	MOVQ 0(DI), R8; \
	MOVQ 8(DI), R9; \
	MOVQ strMask+24(FP), R10; \
	MOVQ $0x5555555555555555, R11; \
	MOVQ $-1, AX; \
	VMOVQ AX, X11

// SKIM_STEP takes the block's masks (AX, BX, R12) through escapes and strings, moves R8 and R9
// past the block, and jumps to found when the block has events (left in R12). ANDNQ a, b, c is
// c = a &^ b (BMI1).
#define SKIM_STEP \
	MOVQ  BX, R13; \
	ORQ   R8, R13; \
	JZ    unescaped; \
	ANDNQ BX, R8, BX; /* BX: bs = backslashes &^ carry */ \
	LEAQ  (BX)(BX*1), R13; \
	ANDNQ BX, R13, R13; /* R13: starts = bs &^ (bs << 1) */ \
	MOVQ  R13, DI; \
	ANDQ  R11, DI; /* DI: starts on even bits */ \
	XORQ  DI, R13; /* R13: starts on odd bits */ \
	ADDQ  BX, DI; /* DI: bs + even starts */ \
	ADDQ  BX, R13; /* R13: bs + odd starts; CF: a run escapes the next block's first byte */ \
	SBBQ  DX, DX; \
	NEGQ  DX; /* DX: the next carry */ \
	ANDNQ DI, BX, DI; /* DI: even-start runs' ends */ \
	ANDNQ R13, BX, R13; /* R13: odd-start runs' ends */ \
	ANDQ  R11, R13; /* odd starts escape even ends */ \
	ANDNQ DI, R11, DI; /* even starts escape odd ends */ \
	ORQ   DI, R13; \
	ORQ   R8, R13; /* R13: escaped */ \
	MOVQ  DX, R8; \
	ANDNQ AX, R13, AX; /* AX: unescaped quotes */ \
unescaped: \
	VMOVQ      AX, X12; /* R13: bytes inside strings = prefixXOR(quotes) ^ inStr */ \
	VPCLMULQDQ $0x00, X11, X12, X12; \
	VMOVQ      X12, R13; \
	XORQ       R9, R13; \
	MOVQ       R13, R9; \
	SARQ       $63, R9; /* R9: the next block's inStr */ \
	ANDNQ      R12, R13, R12; /* R12: events = strMask ? quotes : brackets &^ inside */ \
	ANDNQ      R12, R10, R12; \
	ANDQ       R10, AX; \
	ORQ        AX, R12; \
	JNZ        found

// SKIM_LEAVE stores the state and returns the block index (from SI) and its events (R12).
#define SKIM_LEAVE \
none: \
	XORQ R12, R12; \
found: \
	MOVQ st+16(FP), DI; \
	MOVQ R8, 0(DI); \
	MOVQ R9, 8(DI); \
	SUBQ src+0(FP), SI; \
	SHRQ $6, SI; \
	MOVQ SI, k+32(FP); \
	MOVQ R12, events+40(FP); \
	VZEROUPPER; \
	RET

// func skimBlocksAVX2(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)
//
// Per 64-byte block, as two 32-byte halves: VPCMPEQB against '"' and '\\', and, after OR-ing in
// 0x20 (which maps '[' to '{' and ']' to '}' and nothing else onto either), against '{' and '}';
// VPMOVMSKB turns each comparison into 32 bits of a block mask.
TEXT ·skimBlocksAVX2(SB), NOSPLIT, $0-48
	SKIM_ENTER
	MOVL $0x22, AX
	VMOVQ AX, X0
	VPBROADCASTB X0, Y0 // '"'
	MOVL $0x5c, AX
	VMOVQ AX, X1
	VPBROADCASTB X1, Y1 // '\\'
	MOVL $0x20, AX
	VMOVQ AX, X2
	VPBROADCASTB X2, Y2 // 0x20
	MOVL $0x7b, AX
	VMOVQ AX, X3
	VPBROADCASTB X3, Y3 // '{'
	MOVL $0x7d, AX
	VMOVQ AX, X4
	VPBROADCASTB X4, Y4 // '}'

loop:
	TESTQ CX, CX
	JZ    none
	PREFETCHT0 SKIM_AHEAD(SI)
	VMOVDQU (SI), Y5
	VMOVDQU 32(SI), Y6

	// AX: quotes
	VPCMPEQB  Y0, Y5, Y7
	VPCMPEQB  Y0, Y6, Y8
	VPMOVMSKB Y7, AX
	VPMOVMSKB Y8, DX
	SHLQ      $32, DX
	ORQ       DX, AX

	// BX: backslashes
	VPCMPEQB  Y1, Y5, Y7
	VPCMPEQB  Y1, Y6, Y8
	VPMOVMSKB Y7, BX
	VPMOVMSKB Y8, DX
	SHLQ      $32, DX
	ORQ       DX, BX

	// R12: brackets
	VPOR      Y2, Y5, Y5
	VPOR      Y2, Y6, Y6
	VPCMPEQB  Y3, Y5, Y7
	VPCMPEQB  Y4, Y5, Y8
	VPOR      Y7, Y8, Y7
	VPCMPEQB  Y3, Y6, Y9
	VPCMPEQB  Y4, Y6, Y10
	VPOR      Y9, Y10, Y9
	VPMOVMSKB Y7, R12
	VPMOVMSKB Y9, DX
	SHLQ      $32, DX
	ORQ       DX, R12

	SKIM_STEP
	ADDQ $64, SI
	DECQ CX
	JMP  loop

	SKIM_LEAVE

// func skimBlocksAVX512(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)
//
// The same with AVX-512BW: one 64-byte load, and each VPCMPEQB writes a whole block mask into a
// mask register, so a block takes four compares and three KMOVQ where AVX2 takes six compares,
// six VPMOVMSKB and the shifts that join the halves.
TEXT ·skimBlocksAVX512(SB), NOSPLIT, $0-48
	SKIM_ENTER
	MOVL $0x22, AX
	VPBROADCASTB AX, Z0 // '"'
	MOVL $0x5c, AX
	VPBROADCASTB AX, Z1 // '\\'
	MOVL $0x20, AX
	VPBROADCASTB AX, Z2 // 0x20
	MOVL $0x7b, AX
	VPBROADCASTB AX, Z3 // '{'
	MOVL $0x7d, AX
	VPBROADCASTB AX, Z4 // '}'

loop:
	TESTQ CX, CX
	JZ    none
	PREFETCHT0 SKIM_AHEAD(SI)
	VMOVDQU64 (SI), Z5
	VPCMPEQB  Z0, Z5, K1
	VPCMPEQB  Z1, Z5, K2
	VPORQ     Z2, Z5, Z5
	VPCMPEQB  Z3, Z5, K3
	VPCMPEQB  Z4, Z5, K4
	KORQ      K3, K4, K3
	KMOVQ     K1, AX // quotes
	KMOVQ     K2, BX // backslashes
	KMOVQ     K3, R12 // brackets

	SKIM_STEP
	ADDQ $64, SI
	DECQ CX
	JMP  loop

	SKIM_LEAVE
