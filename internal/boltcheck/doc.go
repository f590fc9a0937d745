// Package boltcheck reads a bbolt file without trusting it: every page is
// read with ReadAt into a buffer of its own and every offset, count and
// page id is checked against that buffer and the file before it is used,
// so damage of any kind (a page count of 0xffff, a key past its page, a
// page id past the end, a cycle) is a reported problem, never a fault.
//
// bbolt itself reads its file through a memory map with unchecked
// pointers, and its own consistency check (Tx.Check) does so on a
// goroutine of its own: a damaged page faults there, where no recover
// reaches, and the process dies ("fatal error: fault"). Check finds that
// damage first, the way Tx.Check would (pages out of bounds or of the
// wrong type, elements past their page, keys out of order, a page
// reached twice, freed pages still in use, pages neither reached nor
// freed), so that a file it accepts is one bbolt opens and reads safely.
// Salvage walks a damaged file and hands out every record it can still
// read, skipping what it cannot.
//
// The format is bbolt's (go.etcd.io/bbolt, file format version 2): two
// meta pages, a freelist page, and B+tree pages of branch and leaf
// elements; nested buckets are leaf values with a header (root page id,
// sequence) and, for a small bucket, its page inline after the header.
package boltcheck
