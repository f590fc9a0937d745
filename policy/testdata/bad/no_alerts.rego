package spanwatch

deny contains "x" if {
	count(input.series) > 0
}
