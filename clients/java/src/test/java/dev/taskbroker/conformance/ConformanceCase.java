package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;

/**
 * One case of the conformance scenario: the class {@code <Name>Case} (the case's name in
 * CamelCase) in the Case.java of its folder, clients/conformance/cases/NN-&lt;name&gt;/, which
 * the harness ({@link Conformance}) loads by name.
 */
interface ConformanceCase {
  void run(Taskbroker tb, String queue) throws Exception;
}
