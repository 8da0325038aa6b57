package policy

import (
	"strings"
	"testing"
)

// BenchmarkSkimCold1MB is BenchmarkSkim1MB on bodies that have left the core's caches: it walks
// 48 copies of the transcript in turn (48 MiB, past any L2), as the proxy meets a body the kernel
// has just copied in while other processes ran.
func BenchmarkSkimCold1MB(b *testing.B) {
	body := transcript(200)
	at := strings.Index(string(body), `"messages":`) + len(`"messages":`)
	copies := make([][]byte, 48)
	for i := range copies {
		copies[i] = append([]byte(nil), body...)
	}
	for _, k := range skimKernels() {
		b.Run("blocks/"+k.name, func(b *testing.B) {
			defer useSkimKernel(k)()
			b.SetBytes(int64(len(body) - at))
			i := 0
			for b.Loop() {
				c := copies[i%len(copies)]
				i++
				if end, err := skimValueBlocks(c, at, 1); err != nil || end != len(c)-1 {
					b.Fatal(end, err)
				}
			}
		})
	}
}
