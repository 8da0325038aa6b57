//go:build !race

package claudecode_test

const raceEnabled = false
