// Package rotate writes a file that rotates by size: when a write would
// take it past a limit, FILE becomes FILE.1, FILE.1 becomes FILE.2, and so
// on up to the number kept, and writing goes on in a new FILE. It is what
// "spanwatch run --output" writes snapshots to.
package rotate
