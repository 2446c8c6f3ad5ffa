//go:build race

package sqlite

// raceOn: the race detector slows the pure-Go SQLite engine about 80 times.
const raceOn = true
