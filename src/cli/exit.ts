/** Documented exit codes. */
export const EXIT = { OK: 0, RUNTIME: 1, CONFIG: 2 } as const;
