/* Runs next_a's report (dlsym_next_a.c), with and without the interposer: the outputs must be
 * the same (cuda_lookups_test.cpp, CudaLookups.DlsymNextFromALibraryIsUnchanged). */
void next_report(void);
int main(void) {
  next_report();
  return 0;
}
