// Headless Chromium for the dashboard test: Debian's /usr/bin/chromium driven by playwright-core.
// Under CI=true a missing browser is a failure (CI must install it), elsewhere the test is skipped.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Why the browser test cannot run here, or null when it can. Throws under CI so the gap is loud. */
export function browserMissing(): string | null {
  if (existsSync(CHROMIUM)) return null;
  const why = `${CHROMIUM} not found: install it (Debian: apt-get install -y chromium) or set CHROMIUM_PATH`;
  if (process.env.CI === 'true') throw new Error(`dashboard test needs Chromium under CI: ${why}`);
  return why;
}

/** A fresh Chromium with a new, empty profile folder (removed on close). */
export async function launchChromium(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'residency-chromium-'));
  // playwright passes the profile as --user-data-dir itself (launchPersistentContext).
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30_000,
    viewport: { width: 1000, height: 760 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
