//go:build !amd64

package policy

// skimKernels lists the block walks this CPU runs: the plain Go one.
func skimKernels() []skimKernel { return []skimKernel{{name: "generic"}} }

// useSkimKernel makes skimBlocks run k: there is only the one.
func useSkimKernel(skimKernel) (restore func()) { return func() {} }
