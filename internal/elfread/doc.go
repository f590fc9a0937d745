// Package elfread reads the parts of an ELF file spanwatch needs — headers,
// symbol tables, sections, compressed or not, DWARF — from files other
// users control, within budgets: nothing a file claims about its own sizes
// makes the agent read or allocate more than a cap.
//
// debug/elf trusts a file's sizes: Symbols reads a whole symbol table and
// builds a value per entry, Section.Data allocates the size a compressed
// section's header claims, File.DWARF inflates every debug section whole,
// and NewFile reads a section name table of any size. A 20 KB sparse file
// can claim a 128 MiB symbol table, and 1 MiB of zlib inflates to a GiB.
// So NewFile here checks the header tables before debug/elf reads them,
// Symbols reads a table a chunk at a time and stops at its cap,
// ReadSection reads or inflates a section up to its cap, and DWARF cuts
// .debug_info at the last whole unit that fits, so a file past a cap is
// read as far as the cap allows, and the cap is counted
// (userfile.Count).
package elfread
