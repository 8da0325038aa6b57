#include "textflag.h"

// func skimBlocksAVX2(src *byte, n int, st *blockState, strMask uint64) (k int, events uint64)
//
// skimBlocksGeneric for CPUs with AVX2 and PCLMULQDQ. Per 64-byte block, as two 32-byte halves:
// VPCMPEQB against '"' and '\\', and, after OR-ing in 0x20 (which maps '[' to '{' and ']' to '}'
// and nothing else onto either), against '{' and '}'; VPMOVMSKB turns each comparison into 32 bits
// of a block mask. Then escapedBy (integer arithmetic, skipped when the block has no backslash
// and starts unescaped) and prefixXOR (a carry-less multiply by all ones), as in skim.go.
//
// Every vector instruction here is VEX-encoded (VMOVQ, VPCLMULQDQ, not MOVQ, PCLMULQDQ): a legacy
// SSE instruction while the YMM registers' upper halves are dirty costs Intel cores a state
// transition each time, and with one per block the 1 MiB skim ran 2.5 ms instead of 90 µs on a
// Xeon with AVX-512 where the AMD machine of the first measurement never showed it.
TEXT ·skimBlocksAVX2(SB), NOSPLIT, $0-48
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ st+16(FP), DI
	MOVQ 0(DI), R8       // escaped carry
	MOVQ 8(DI), R9       // inStr
	MOVQ strMask+24(FP), R10
	MOVQ $0x5555555555555555, R11

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
	MOVQ $-1, AX
	VMOVQ AX, X11        // all ones: the multiplier of prefixXOR

loop:
	TESTQ CX, CX
	JZ    none
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

	// escapedBy: quotes &^= the bytes escaped; R8 = the next block's carry.
	MOVQ BX, R13
	ORQ  R8, R13
	JZ   unescaped
	MOVQ R8, R13
	NOTQ R13
	ANDQ R13, BX         // BX: bs = backslashes &^ carry
	MOVQ BX, R13
	SHLQ $1, R13
	NOTQ R13
	ANDQ BX, R13         // R13: starts = bs &^ (bs << 1)
	MOVQ R13, DI
	ANDQ R11, DI         // DI: starts on even bits
	XORQ DI, R13         // R13: starts on odd bits
	ADDQ BX, DI          // DI: bs + even starts
	ADDQ BX, R13         // R13: bs + odd starts; CF: a run escapes the next block's first byte
	SBBQ DX, DX
	NEGQ DX              // DX: the next carry
	NOTQ BX
	ANDQ BX, DI          // DI: even-start runs' ends
	ANDQ BX, R13         // R13: odd-start runs' ends
	ANDQ R11, R13        // odd starts escape even ends
	MOVQ R11, BX
	NOTQ BX
	ANDQ BX, DI          // even starts escape odd ends
	ORQ  DI, R13
	ORQ  R8, R13         // R13: escaped
	MOVQ DX, R8
	NOTQ R13
	ANDQ R13, AX         // AX: unescaped quotes

unescaped:
	// R13: bytes inside strings = prefixXOR(quotes) ^ inStr; R9: the next block's inStr
	VMOVQ      AX, X12
	VPCLMULQDQ $0x00, X11, X12, X12
	VMOVQ      X12, R13
	XORQ      R9, R13
	MOVQ      R13, R9
	SARQ      $63, R9

	// R12: events = strMask ? quotes : brackets &^ inside
	NOTQ R13
	ANDQ R13, R12
	MOVQ R10, R13
	NOTQ R13
	ANDQ R13, R12
	ANDQ R10, AX
	ORQ  AX, R12
	JNZ  found

	ADDQ $64, SI
	DECQ CX
	JMP  loop

none:
	XORQ R12, R12

found:
	MOVQ st+16(FP), DI
	MOVQ R8, 0(DI)
	MOVQ R9, 8(DI)
	SUBQ src+0(FP), SI
	SHRQ $6, SI
	MOVQ SI, k+32(FP)
	MOVQ R12, events+40(FP)
	VZEROUPPER
	RET
