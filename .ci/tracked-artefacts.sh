#!/usr/bin/env bash
# Fails when git tracks a build artefact: a compiled test binary (*.test),
# a coverage file or profile, or any other ELF file (a `go build` output
# committed by mistake). The bpf2go objects bpf/*_bpfel.o and *_bpfeb.o are
# the exception: they are generated output meant to be committed (test.sh
# checks that they are up to date).
set -euo pipefail
cd "$(dirname "$0")/.."

bad=()
while IFS= read -r -d '' f; do
	case $f in
	bpf/*_bpfel.o | bpf/*_bpfeb.o) ;;
	*.test | *.coverprofile | coverage.out | */coverage.out | cover.out | */cover.out | *.pprof | *.prof)
		bad+=("$f (${f##*.} file)")
		;;
	esac
done < <(git ls-files -z)
# ELF files, by their first four bytes, as committed (the work tree may
# differ); one process for every file.
while IFS= read -r f; do
	case $f in
	bpf/*_bpfel.o | bpf/*_bpfeb.o | *.test) ;; # committed output; named above
	*) bad+=("$f (ELF binary)") ;;
	esac
done < <(git ls-files -s -z | perl -0ne '
	my ($mode, $obj, $path) = /^(\d+) ([0-9a-f]+) \d+\t(.*)\0$/s or next;
	next if $mode eq "160000" or $mode eq "120000";  # submodules, symlinks
	print "$obj $path\n";
' | { ids=(); paths=(); while read -r id p; do ids+=("$id"); paths+=("$p"); done
	i=0
	printf '%s\n' "${ids[@]}" | git cat-file --batch | perl -ne '
		BEGIN { $| = 1 }
		if (/^([0-9a-f]+) blob (\d+)$/) { read(STDIN, my $b, $2); <STDIN>; print substr($b, 0, 4) eq "\x7fELF" ? "1\n" : "0\n" }
	' | while read -r elf; do
		[[ $elf == 1 ]] && echo "${paths[$i]}"
		i=$((i + 1))
	done
})

if ((${#bad[@]})); then
	echo "git tracks build artefacts; remove them (git rm --cached FILE) and ignore them in .gitignore:" >&2
	printf '  %s\n' "${bad[@]}" >&2
	exit 1
fi
echo "no build artefacts tracked ($(git ls-files | wc -l) files checked)"
